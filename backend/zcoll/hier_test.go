package zcoll

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/reduce"
)

// hierLayouts: hosts of 2 and 3 ranks, host-major and interleaved (the
// launcher's numbering need not follow the hosts), 2 and 3 hosts.
var hierLayouts = []Hosts{
	{{0, 1}, {2, 3}},
	{{0, 2}, {1, 3}},
	{{0, 1, 2}, {3, 4, 5}},
	{{4, 0}, {1, 5}, {3, 2}},
}

func hierPlans() []namedPlan {
	return []namedPlan{
		{"plain", Plan{Segment: testSegment}},
		{"zip3", Plan{Framed: true, Kind: codec.Zip3, Segment: testSegment, A2ADesign: 2}},
		{"huff", Plan{Framed: true, Kind: codec.Huff, Segment: testSegment}},
	}
}

// hierRef is the documented order: over each host's ranks in local order,
// then over the hosts in host order.
func hierRef(dt dtype.DType, op reduce.Op, h Hosts, xs [][]byte) []byte {
	parts := make([][]byte, len(h))
	for i, host := range h {
		parts[i] = refReduce(dt, op, bufs.Pick(xs, host))
	}
	return refReduce(dt, op, parts)
}

func TestHostsHierarchical(t *testing.T) {
	require.True(t, Hosts{{0, 1}, {2, 3}}.Hierarchical(4))
	require.True(t, Hosts{{3, 1}, {0, 2}}.Hierarchical(4))
	require.False(t, Hosts{{0, 1, 2, 3}}.Hierarchical(4), "one host")
	require.False(t, Hosts{{0}, {1}, {2}, {3}}.Hierarchical(4), "one rank per host")
	require.True(t, Hosts{{0, 1, 2}, {3}}.Hierarchical(4), "unequal hosts")
	require.False(t, Hosts{{0, 1, 2}, {3}}.Equal())
	require.Equal(t, 1, Hosts{{0, 1, 2}, {3}}.Rails())
	require.Equal(t, 2, Hosts{{0, 1, 2}, {3, 4}, {5, 6, 7}}.Rails())
	require.True(t, Hosts{{3, 1}, {0, 2}}.Equal())
	require.False(t, Hosts{{0, 1}, {1, 2}}.Hierarchical(4), "a rank twice")
	require.False(t, Hosts{{0, 1}, {2, 3}}.Hierarchical(5), "not every rank")
}

// unequalLayouts: hosts of different sizes (all-reduce and broadcast run
// hierarchically on them; the rails are the smallest host's local indices).
var unequalLayouts = []Hosts{
	{{0, 1, 2}, {3}},
	{{0, 1}, {2}, {3}},
	{{3, 0, 4}, {1, 2}},
	{{5, 1, 6}, {0, 2}, {3, 4, 7}},
}

func allLayouts() []Hosts { return append(append([]Hosts{}, hierLayouts...), unequalLayouts...) }

// size is the number of ranks in h.
func (h Hosts) size() int {
	n := 0
	for _, host := range h {
		n += len(host)
	}
	return n
}

func TestHierAllReduce(t *testing.T) {
	defer func(v int) { hierPieceMin = v }(hierPieceMin)
	hierPieceMin = 1000 // every buffer below is pipelined in pieces
	for _, h := range allLayouts() {
		n := h.size()
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16, dtype.Int32} {
			for i, data := range []dataKind{gaussian, specials, randBits} {
				// chunks one element apart, and fewer elements than ranks
				numel := []int{1000*n + 3, 2, 5}[i]
				t.Run(fmt.Sprintf("%v/%v/%v/%d", h, dt, data, numel), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(dt)*10+uint64(data)))
					xs := make([][]byte, n)
					for r := range xs {
						xs[r] = genData(rng, dt, numel, data)
					}
					want := hierRef(dt, reduce.Sum, h, xs)
					for _, p := range hierPlans() {
						w := conntest.NewWorld(n)
						args := make([]Args, n)
						outs := make([][]byte, n)
						for r := range n {
							outs[r] = clone(xs[r])
							args[r] = Args{Args: collective.Args{DType: dt, Op: reduce.Sum, In: [][]byte{outs[r]}, Out: [][]byte{outs[r]}}, Plan: p.p}
						}
						mustOK(t, w, runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error {
							return HierAllReduce(ctx, c, a, h)
						}, args, runOpts{}))
						for r := range n {
							sameBytes(t, fmt.Sprintf("%s rank %d", p.name, r), outs[r], want)
						}
					}
				})
			}
		}
	}
}

func TestHierReduceScatter(t *testing.T) {
	defer func(v int) { hierPieceMin = v }(hierPieceMin)
	hierPieceMin = 1000 // pipelined in pieces
	for _, h := range allLayouts() {
		n := h.size()
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32} {
			t.Run(fmt.Sprintf("%v/%v", h, dt), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(dt)))
				numel := 777
				xs := make([][][]byte, n) // xs[r][j]: rank r's contribution to block j
				for r := range xs {
					xs[r] = make([][]byte, n)
					for j := range xs[r] {
						xs[r][j] = genData(rng, dt, numel, specials)
					}
				}
				for _, p := range hierPlans() {
					w := conntest.NewWorld(n)
					args := make([]Args, n)
					outs := make([][]byte, n)
					for r := range n {
						ins := make([][]byte, n)
						for j := range ins {
							ins[j] = clone(xs[r][j])
						}
						outs[r] = ins[r] // in place
						args[r] = Args{Args: collective.Args{DType: dt, Op: reduce.Sum, In: ins, Out: [][]byte{outs[r]}}, Plan: p.p}
					}
					mustOK(t, w, runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error {
						return HierReduceScatter(ctx, c, a, h)
					}, args, runOpts{}))
					for j := range n {
						contrib := make([][]byte, n)
						for r := range n {
							contrib[r] = xs[r][j]
						}
						sameBytes(t, fmt.Sprintf("%s block %d", p.name, j), outs[j], hierRef(dt, reduce.Sum, h, contrib))
					}
				}
			})
		}
	}
}

// The hierarchical all-gather moves bytes only: bit for bit the flat
// result, shards of different lengths too.
func TestHierAllGather(t *testing.T) {
	defer func(v int) { hierPieceMin = v }(hierPieceMin)
	hierPieceMin = 1000 // pipelined in pieces
	for _, h := range allLayouts() {
		n := h.size()
		t.Run(fmt.Sprint(h), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 9))
			shards := make([][]byte, n)
			for r := range shards {
				shards[r] = genData(rng, dtype.BFloat16, (500+r)*(r%3), specials) // empty shards too
			}
			for _, p := range hierPlans() {
				w := conntest.NewWorld(n)
				args := make([]Args, n)
				outs := make([][][]byte, n)
				for r := range n {
					outs[r] = make([][]byte, n)
					for j := range outs[r] {
						outs[r][j] = make([]byte, len(shards[j]))
					}
					args[r] = Args{Args: collective.Args{DType: dtype.BFloat16, In: [][]byte{shards[r]}, Out: outs[r]}, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error {
					return HierAllGather(ctx, c, a, h)
				}, args, runOpts{}))
				for r := range n {
					for j := range n {
						sameBytes(t, fmt.Sprintf("%s rank %d shard %d", p.name, r, j), outs[r][j], shards[j])
					}
				}
			}
		})
	}
}

// Only the rails cross hosts, each byte once: an all-reduce of M bytes
// (uncoded) sends 2*M*(H-1) bytes between hosts in all, half what the flat
// two-shot all-reduce sends on 2 hosts of 2 ranks, and two thirds of it on
// hosts of 3 and 1 (one rail).
func TestHierCrossHostBytes(t *testing.T) {
	for _, c := range []struct {
		h      Hosts
		hostOf []int
		flat   int64 // flat's bytes over hierarchical's, in halves
	}{
		{Hosts{{0, 2}, {1, 3}}, []int{0, 1, 0, 1}, 4},
		{Hosts{{0, 1, 2}, {3}}, []int{0, 0, 0, 1}, 3},
		{Hosts{{3, 1, 2}, {0}}, []int{1, 0, 0, 0}, 3},
	} {
		t.Run(fmt.Sprint(c.h), func(t *testing.T) { hierCrossHostBytes(t, c.h, c.hostOf, c.flat) })
	}
}

func hierCrossHostBytes(t *testing.T, h Hosts, hostOf []int, flatHalves int64) {
	const n, numel = 4, 4096 * 4
	crossing := func(f opFunc) int64 {
		w := conntest.NewWorld(n)
		across := countAcross(w, hostOf)
		args := make([]Args, n)
		for r := range n {
			b := make([]byte, numel*4)
			args[r] = Args{Args: collective.Args{DType: dtype.Float32, Op: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}}
		}
		mustOK(t, w, runWorld(t, w, f, args, runOpts{}))
		return across.Load()
	}
	m := int64(numel * 4)
	hier := crossing(func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllReduce(ctx, c, a, h) })
	flat := crossing(AllReduce)
	require.Equal(t, 2*m*int64(len(h)-1), hier)
	require.Equal(t, flatHalves*hier, 2*flat)
}

// The hierarchical broadcast is the chain visited host by host: the flat
// result bit for bit, from every root, on equal and unequal hosts, coded
// or not; the buffer crosses H-1 host boundaries where the chain in rank
// order crosses one per hop between hosts.
func TestHierBroadcast(t *testing.T) {
	layouts := append([]Hosts{{{0, 1, 2}, {3}}, {{3}, {0, 2}, {1, 4}}}, hierLayouts...)
	for _, h := range layouts {
		n := 0
		for _, host := range h {
			n += len(host)
		}
		hostOf := make([]int, n)
		for i, host := range h {
			for _, r := range host {
				hostOf[r] = i
			}
		}
		rng := rand.New(rand.NewPCG(uint64(n), 17))
		want := genData(rng, dtype.BFloat16, 3000, gaussian)
		for root := range n {
			for _, p := range hierPlans() {
				w := conntest.NewWorld(n)
				across := countAcross(w, hostOf)
				args := make([]Args, n)
				outs := make([][]byte, n)
				for r := range n {
					outs[r] = make([]byte, len(want))
					if r == root {
						copy(outs[r], want)
					}
					args[r] = Args{Args: collective.Args{DType: dtype.BFloat16, Root: root, In: [][]byte{outs[r]}, Out: [][]byte{outs[r]}}, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error {
					return HierBroadcast(ctx, c, a, h)
				}, args, runOpts{}))
				for r := range n {
					sameBytes(t, fmt.Sprintf("%v root %d %s rank %d", h, root, p.name, r), outs[r], want)
				}
				if p.name == "plain" {
					require.Equal(t, int64(len(h)-1)*int64(len(want)), across.Load(), "%v root %d: host-link bytes", h, root)
				}
			}
		}
	}
	require.Error(t, HierBroadcast(context.Background(), conntest.NewWorld(2).Conns()[0], Args{}, Hosts{{0}, {0}}))
}

// countAcross counts the bytes w's messages carry between ranks of
// different hosts (hostOf[rank]).
func countAcross(w *conntest.World, hostOf []int) *atomic.Int64 {
	var across atomic.Int64
	w.Corrupt = func(src, dst int, _ uint32, msg []byte) []byte {
		if hostOf[src] != hostOf[dst] {
			across.Add(int64(len(msg)))
		}
		return msg
	}
	return &across
}

// All-to-all takes equal hosts only (the transport layer runs it flat
// otherwise); asked for unequal ones it fails on every rank, saying so.
func TestHierAllToAllNeedsEqualHosts(t *testing.T) {
	h := Hosts{{0, 1, 2}, {3}}
	w := conntest.NewWorld(4)
	args := make([]Args, 4)
	for r := range args {
		args[r] = Args{Args: collective.Args{DType: dtype.Float32}}
	}
	for r, err := range runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error {
		return HierAllToAll(ctx, c, a, h)
	}, args, runOpts{}) {
		require.ErrorContains(t, err, "equal size", "rank %d", r)
	}
}

// On hosts of 3 and 1 ranks each host link carries each block once per
// other host: a reduce-scatter or all-gather of blocks of B bytes sends 4B
// between the hosts (host 1's block one way, host 0's three the other),
// where the flat algorithms send 6B (every pair across, each way).
func TestHierUnequalCrossHostBytes(t *testing.T) {
	h := Hosts{{0, 2, 3}, {1}}
	hostOf := []int{0, 1, 0, 0}
	const n, numel = 4, 4096
	const b = int64(numel * 4)
	crossing := func(f opFunc, gather bool) int64 {
		w := conntest.NewWorld(n)
		across := countAcross(w, hostOf)
		args := make([]Args, n)
		for r := range n {
			blocks := make([][]byte, n)
			for j := range blocks {
				blocks[j] = make([]byte, b)
			}
			if gather {
				args[r] = Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{make([]byte, b)}, Out: blocks}}
			} else {
				args[r] = Args{Args: collective.Args{DType: dtype.Float32, Op: reduce.Sum, In: blocks, Out: [][]byte{make([]byte, b)}}}
			}
		}
		mustOK(t, w, runWorld(t, w, f, args, runOpts{}))
		return across.Load()
	}
	rs := crossing(func(ctx context.Context, c collective.VarConn, a Args) error { return HierReduceScatter(ctx, c, a, h) }, false)
	ag := crossing(func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllGather(ctx, c, a, h) }, true)
	require.Equal(t, 4*b, rs, "reduce_scatter")
	require.Equal(t, 4*b, ag, "all_gather")
	require.Equal(t, 6*b, crossing(ReduceScatter, false), "flat reduce_scatter")
	require.Equal(t, 6*b, crossing(AllGather, true), "flat all_gather")
}
