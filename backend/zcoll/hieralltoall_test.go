package zcoll

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/transport"
)

// a2aHierLayouts: the other ops' layouts and 4x2.
var a2aHierLayouts = append(slices.Clone(hierLayouts), Hosts{{0, 1}, {2, 3}, {4, 5}, {6, 7}})

// hierSplit is the elements rank r sends rank j: uneven, with empty
// blocks, and rank 1 sending nothing at all (so whole bundles are empty).
func hierSplit(numel, r, j int) int {
	if r == 1 || (3*r+j)%5 == 0 {
		return 0
	}
	return numel*((r+2*j)%4+1)/3 + (r*j)%7
}

// a2aWorld runs f (an all-to-all) on n ranks with blocks xs[r][j] from
// rank r to rank j and returns Out, the own block in place on odd ranks.
func a2aWorld(t *testing.T, w *conntest.World, f opFunc, dt dtype.DType, p Plan, xs [][][]byte) [][][]byte {
	n := len(xs)
	args := make([]Args, n)
	outs := make([][][]byte, n)
	for r := range n {
		ins := make([][]byte, n)
		outs[r] = make([][]byte, n)
		for j := range n {
			ins[j] = clone(xs[r][j])
			outs[r][j] = make([]byte, len(xs[j][r]))
		}
		if r%2 == 1 {
			outs[r][r] = ins[r]
		}
		args[r] = Args{Args: collective.Args{DType: dt, In: ins, Out: outs[r]}, Plan: p}
	}
	mustOK(t, w, runWorld(t, w, f, args, runOpts{}))
	return outs
}

// The hierarchical all-to-all moves bytes only: bit for bit the flat
// algorithm's result (and the blocks sent), uneven and empty blocks, coded
// and not.
func TestHierAllToAll(t *testing.T) {
	plans := append(hierPlans(),
		namedPlan{"auto/d2", Plan{Framed: true, Kind: codec.Auto, Segment: testSegment, A2ADesign: 2}},
		namedPlan{"raw", Plan{Framed: true, Kind: codec.Raw, Segment: testSegment}})
	for _, h := range a2aHierLayouts {
		n := len(h) * len(h[0])
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16} {
			for _, data := range []dataKind{gaussian, specials, randBits} {
				t.Run(fmt.Sprintf("%v/%v/%v", h, dt, data), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(dt)*10+uint64(data)))
					xs := make([][][]byte, n)
					for r := range xs {
						xs[r] = make([][]byte, n)
						for j := range xs[r] {
							xs[r][j] = genData(rng, dt, hierSplit(300, r, j), data)
						}
					}
					for _, p := range plans {
						flat := a2aWorld(t, conntest.NewWorld(n), AllToAll, dt, p.p, xs)
						hier := a2aWorld(t, conntest.NewWorld(n), func(ctx context.Context, c collective.VarConn, a Args) error {
							return HierAllToAll(ctx, c, a, h)
						}, dt, p.p, xs)
						for r := range n {
							for j := range n {
								what := fmt.Sprintf("%s rank %d Out[%d]", p.name, r, j)
								sameBytes(t, what, hier[r][j], flat[r][j])
								sameBytes(t, what, hier[r][j], xs[j][r])
							}
						}
					}
				})
			}
		}
	}
}

// Uncoded, the host links carry the bytes destined off-host, each once
// (as flat), plus each bundle's lengths (8*R bytes per rail and ordered
// pair of hosts), in fewer messages than flat's per-pair ones.
func TestHierAllToAllHostLinkBytes(t *testing.T) {
	for _, h := range a2aHierLayouts {
		H, R := len(h), len(h[0])
		n := H * R
		hostOf := make([]int, n)
		for i, host := range h {
			for _, r := range host {
				hostOf[r] = i
			}
		}
		rng := rand.New(rand.NewPCG(uint64(n), 5))
		xs := make([][][]byte, n)
		offHost := int64(0)
		for r := range xs {
			xs[r] = make([][]byte, n)
			for j := range xs[r] {
				xs[r][j] = genData(rng, dtype.BFloat16, hierSplit(1000, r, j), gaussian)
				if hostOf[r] != hostOf[j] {
					offHost += int64(len(xs[r][j]))
				}
			}
		}
		plain := Plan{Segment: 1 << 20} // one message per block or bundle
		count := func(f opFunc) (bytes, msgs int64) {
			w := conntest.NewWorld(n)
			var m atomic.Int64
			across := countAcross(w, hostOf)
			corrupt := w.Corrupt
			w.Corrupt = func(src, dst int, slot uint32, msg []byte) []byte {
				if hostOf[src] != hostOf[dst] {
					m.Add(1)
				}
				return corrupt(src, dst, slot, msg)
			}
			a2aWorld(t, w, f, dtype.BFloat16, plain, xs)
			return across.Load(), m.Load()
		}
		hier, hierMsgs := count(func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllToAll(ctx, c, a, h) })
		flat, flatMsgs := count(AllToAll)
		require.Equal(t, offHost, flat, "%v: flat", h)
		require.Equal(t, offHost+int64(H*(H-1)*R*8*R), hier, "%v: hierarchical", h)
		// flat: one message per non-empty off-host block; hierarchical: one
		// per non-empty bundle, and one per bundle's lengths
		bundles := int64(H * (H - 1) * R)
		t.Logf("%v: host-link bytes %d (off-host %d), messages flat %d, hierarchical %d (%d of lengths)", h, hier, offHost, flatMsgs, hierMsgs, bundles)
		require.LessOrEqual(t, hierMsgs-bundles, bundles, "%v: one message per bundle", h)
		require.Less(t, hierMsgs-bundles, flatMsgs, "%v: fewer data messages than flat", h)
	}
}

// A block whose length the sender and receiver disagree on fails the
// receiver with a length mismatch naming the sender (on or off its host);
// every other rank and block completes.
func TestHierAllToAllWrongSplit(t *testing.T) {
	h := Hosts{{0, 1}, {2, 3}}
	for _, src := range []int{1, 2} { // rank 0's host peer, and a rank across
		n := 4
		xs := make([][][]byte, n)
		rng := rand.New(rand.NewPCG(1, uint64(src)))
		for r := range xs {
			xs[r] = make([][]byte, n)
			for j := range xs[r] {
				xs[r][j] = genData(rng, dtype.Float32, 50+r+j, gaussian)
			}
		}
		args := make([]Args, n)
		for r := range n {
			out := make([][]byte, n)
			for j := range out {
				out[j] = make([]byte, len(xs[j][r]))
			}
			if r == 0 {
				out[src] = make([]byte, len(xs[src][0])+4) // expects one more element
			}
			args[r] = Args{Args: collective.Args{DType: dtype.Float32, In: xs[r], Out: out}, Plan: Plan{Segment: testSegment}}
		}
		w := conntest.NewWorld(n)
		errs := runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllToAll(ctx, c, a, h) }, args, runOpts{})
		var me *transport.MismatchError
		require.True(t, errors.As(errs[0], &me), "src %d: rank 0 returned %v", src, errs[0])
		require.Equal(t, src, me.Peer)
		require.Equal(t, uint64(len(xs[src][0])), me.GotLen)
		require.Equal(t, uint64(len(xs[src][0])+4), me.WantLen)
		for r := range n {
			if r != 0 {
				require.NoError(t, errs[r], "rank %d", r)
			}
			for j := range n {
				if r == 0 && j == src {
					continue
				}
				sameBytes(t, fmt.Sprintf("src %d rank %d Out[%d]", src, r, j), args[r].Out[j], xs[j][r])
			}
		}
	}
}

func TestHierAllToAllInvalid(t *testing.T) {
	c := conntest.NewWorld(4).Conns()[0]
	h := Hosts{{0, 1}, {2, 3}}
	buf := make([]byte, 16)
	four := [][]byte{buf, buf, buf, buf}
	require.Error(t, HierAllToAll(context.Background(), c, Args{Args: collective.Args{DType: dtype.Float32, In: four, Out: four[:3]}}, h))
	require.Error(t, HierAllToAll(context.Background(), c, Args{Args: collective.Args{DType: dtype.Float32, In: four, Out: [][]byte{buf[:8], buf, buf, buf}}}, h))
	odd := [][]byte{buf, buf[:3], buf, buf}
	require.Error(t, HierAllToAll(context.Background(), c, Args{Args: collective.Args{DType: dtype.Float32, In: odd, Out: odd}, Plan: Plan{Framed: true}}, h))
	require.Error(t, HierAllToAll(context.Background(), c, Args{Args: collective.Args{DType: dtype.Float32, In: four, Out: four}}, Hosts{{0, 1, 2, 3}}))
}
