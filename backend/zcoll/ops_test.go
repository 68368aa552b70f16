package zcoll

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/reduce"
)

// tcase is one input configuration; every op test runs it under every
// plan and checks (1) bit-identity across plans, by (2) comparing each
// plan's output with an independent reference of the documented order,
// (3) on every rank.
type tcase struct {
	dt    dtype.DType
	n     int
	numel int
	data  dataKind
	op    reduce.Op
	idx   int
}

func (c tcase) String() string {
	return fmt.Sprintf("%v/n%d/numel%d/%v/%v", c.dt, c.n, c.numel, c.data, c.op)
}

var testOps = []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Product}

// cases enumerates dtypes x worlds x sizes, rotating the data set and the
// reduce op so that every combination of neighbours occurs.
func cases(worlds, numels []int) []tcase {
	var cs []tcase
	i := 0
	for _, dt := range testDTypes {
		for _, n := range worlds {
			for _, numel := range numels {
				cs = append(cs, tcase{dt: dt, n: n, numel: numel, data: dataKind(i % int(numDataKinds)),
					op: testOps[(i/int(numDataKinds)+i)%len(testOps)], idx: i})
				i++
			}
		}
	}
	return cs
}

// sizes: empty, one element, fewer than ranks, odd, and enough for many
// testSegment-byte segments per block (not divisible by any world size).
func testNumels() []int {
	if testing.Short() {
		return []int{0, 1, 3, 61, 1001}
	}
	return []int{0, 1, 3, 61, 1001, 2053}
}

var testWorlds = []int{1, 2, 3, 4, 5}

func rngFor(c tcase) *rand.Rand { return rand.New(rand.NewPCG(uint64(c.idx), 42)) }

func TestAllReduce(t *testing.T) {
	worlds := append(testWorlds, 8)
	for _, c := range cases(worlds, testNumels()) {
		t.Run(c.String(), func(t *testing.T) {
			rng := rngFor(c)
			xs := make([][]byte, c.n)
			for r := range xs {
				xs[r] = genData(rng, c.dt, c.numel, c.data)
			}
			want := refReduce(c.dt, c.op, xs)
			inPlace := c.idx%2 == 0
			for _, p := range plansFor(true, testSegment) {
				w := conntest.NewWorld(c.n)
				args := make([]Args, c.n)
				outs := make([][]byte, c.n)
				ins := make([][]byte, c.n)
				for r := range c.n {
					ins[r] = clone(xs[r])
					outs[r] = ins[r]
					if !inPlace {
						outs[r] = make([]byte, len(xs[r]))
					}
					args[r] = Args{Args: collective.Args{DType: c.dt, Op: c.op, In: [][]byte{ins[r]}, Out: [][]byte{outs[r]}}, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, AllReduce, args, runOpts{}))
				for r := range c.n {
					sameBytes(t, fmt.Sprintf("%s rank %d", p.name, r), outs[r], want)
					if !inPlace {
						sameBytes(t, fmt.Sprintf("%s rank %d input", p.name, r), ins[r], xs[r])
					}
				}
			}
		})
	}
}

func TestReduceScatter(t *testing.T) {
	worlds := append(testWorlds, 8)
	for _, c := range cases(worlds, testNumels()) {
		t.Run(c.String(), func(t *testing.T) {
			rng := rngFor(c)
			xs := make([][][]byte, c.n) // xs[r][j]: rank r's contribution to block j
			for r := range xs {
				xs[r] = make([][]byte, c.n)
				for j := range xs[r] {
					xs[r][j] = genData(rng, c.dt, c.numel, c.data)
				}
			}
			want := make([][]byte, c.n)
			for j := range want {
				parts := make([][]byte, c.n)
				for r := range parts {
					parts[r] = xs[r][j]
				}
				want[j] = refReduce(c.dt, c.op, parts)
			}
			inPlace := c.idx%2 == 1
			for _, p := range plansFor(true, testSegment) {
				w := conntest.NewWorld(c.n)
				args := make([]Args, c.n)
				ins := make([][][]byte, c.n)
				outs := make([][]byte, c.n)
				for r := range c.n {
					ins[r] = make([][]byte, c.n)
					for j := range ins[r] {
						ins[r][j] = clone(xs[r][j])
					}
					outs[r] = make([]byte, c.numel*c.dt.Size())
					if inPlace {
						outs[r] = ins[r][r]
					}
					args[r] = Args{Args: collective.Args{DType: c.dt, Op: c.op, In: ins[r], Out: [][]byte{outs[r]}}, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, ReduceScatter, args, runOpts{}))
				for r := range c.n {
					sameBytes(t, fmt.Sprintf("%s rank %d", p.name, r), outs[r], want[r])
					for j := range c.n {
						if !(inPlace && j == r) {
							sameBytes(t, fmt.Sprintf("%s rank %d In[%d]", p.name, r, j), ins[r][j], xs[r][j])
						}
					}
				}
			}
		})
	}
}

func TestAllGather(t *testing.T) {
	worlds := append(testWorlds, 8)
	for _, c := range cases(worlds, testNumels()) {
		if c.op != reduce.Sum && c.op != reduce.Max { // not a reduction: fewer repeats
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			rng := rngFor(c)
			shards := make([][]byte, c.n) // uneven, same on every rank
			for b := range shards {
				numel := c.numel
				if numel > 0 {
					numel += (b * 3) % 5
				}
				shards[b] = genData(rng, c.dt, numel, c.data)
			}
			inPlace := c.idx%2 == 0
			for _, p := range plansFor(false, testSegment) {
				w := conntest.NewWorld(c.n)
				args := make([]Args, c.n)
				outs := make([][][]byte, c.n)
				for r := range c.n {
					outs[r] = make([][]byte, c.n)
					for j := range outs[r] {
						outs[r][j] = make([]byte, len(shards[j]))
						for i := range outs[r][j] {
							outs[r][j][i] = 0xA5 // garbage
						}
					}
					in := clone(shards[r])
					if inPlace {
						copy(outs[r][r], in)
						in = outs[r][r]
					}
					args[r] = Args{Args: collective.Args{DType: c.dt, In: [][]byte{in}, Out: outs[r]}, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, AllGather, args, runOpts{}))
				for r := range c.n {
					for j := range c.n {
						sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", p.name, r, j), outs[r][j], shards[j])
					}
				}
			}
		})
	}
}

// a2aLen is rank r's uneven, sometimes empty, block for rank j.
func a2aLen(numel, r, j int) int {
	if numel == 0 {
		return 0
	}
	return numel*((r+2*j)%4)/2 + (r+j)%3
}

func TestAllToAll(t *testing.T) {
	worlds := append(testWorlds, 8)
	for _, c := range cases(worlds, testNumels()) {
		if c.op != reduce.Sum && c.op != reduce.Min {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			rng := rngFor(c)
			xs := make([][][]byte, c.n)
			for r := range xs {
				xs[r] = make([][]byte, c.n)
				for j := range xs[r] {
					xs[r][j] = genData(rng, c.dt, a2aLen(c.numel, r, j), c.data)
				}
			}
			for _, p := range plansFor(true, testSegment) {
				w := conntest.NewWorld(c.n)
				args := make([]Args, c.n)
				outs := make([][][]byte, c.n)
				for r := range c.n {
					outs[r] = make([][]byte, c.n)
					ins := make([][]byte, c.n)
					for j := range c.n {
						ins[j] = clone(xs[r][j])
						outs[r][j] = make([]byte, len(xs[j][r]))
					}
					if c.idx%2 == 0 {
						outs[r][r] = ins[r] // own block in place
					}
					args[r] = Args{Args: collective.Args{DType: c.dt, In: ins, Out: outs[r]}, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, AllToAll, args, runOpts{}))
				for r := range c.n {
					for j := range c.n {
						sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", p.name, r, j), outs[r][j], xs[j][r])
					}
				}
			}
		})
	}
}

func TestBroadcast(t *testing.T) {
	worlds := append(testWorlds, 8)
	for _, c := range cases(worlds, testNumels()) {
		if c.op != reduce.Sum && c.op != reduce.Product {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			rng := rngFor(c)
			src := genData(rng, c.dt, c.numel, c.data)
			root := c.idx % c.n
			for _, p := range plansFor(false, testSegment) {
				w := conntest.NewWorld(c.n)
				args := make([]Args, c.n)
				outs := make([][]byte, c.n)
				for r := range c.n {
					outs[r] = make([]byte, len(src))
					a := collective.Args{DType: c.dt, Root: root, Out: [][]byte{outs[r]}}
					if r == root {
						a.In = [][]byte{clone(src)}
						if c.idx%2 == 0 {
							outs[r] = a.In[0]
							a.Out[0] = outs[r]
						}
					}
					args[r] = Args{Args: a, Plan: p.p}
				}
				mustOK(t, w, runWorld(t, w, Broadcast, args, runOpts{}))
				for r := range c.n {
					sameBytes(t, fmt.Sprintf("%s rank %d", p.name, r), outs[r], src)
				}
			}
		})
	}
}

// All-reduce receives each reduced segment straight over this rank's own
// contribution to it, which it may still be sending or coding as far as
// its own goroutines know; jitter varies the interleavings, and the result
// must still be exact.
func TestAllReduceJitter(t *testing.T) {
	for i := range 20 {
		n := 2 + i%3
		dt := testDTypes[i%len(testDTypes)]
		rng := rand.New(rand.NewPCG(uint64(i), 8))
		xs := make([][]byte, n)
		for r := range xs {
			xs[r] = genData(rng, dt, 3000, gaussian)
		}
		want := refReduce(dt, reduce.Sum, xs)
		for _, p := range []Plan{{Segment: 200}, {Framed: true, Kind: codec.Zip3, Segment: 200}} {
			w := conntest.NewWorld(n)
			w.Jitter = 100 * time.Microsecond
			args := make([]Args, n)
			for r := range n {
				b := clone(xs[r])
				args[r] = Args{Args: collective.Args{DType: dt, Op: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}, Plan: p}
			}
			mustOK(t, w, runWorld(t, w, AllReduce, args, runOpts{}))
			for r := range n {
				sameBytes(t, fmt.Sprintf("%v n%d rank %d framed=%v", dt, n, r, p.Framed), args[r].Out[0], want)
			}
		}
	}
}

// Blocks one element apart can be cut into very different numbers of
// segments (the default segment size follows the block size in whole codec
// blocks): here 8 and 12. The reduce-scatter's lead over the all-gather is
// counted in this rank's segments, so a stream with more segments than
// this rank's block must not wait for segments that never come.
func TestAllReduceBlocksCutDifferently(t *testing.T) {
	const n = 4
	es := dtype.BFloat16.Size()
	elems := 24 << 16 // per block: 24 codec blocks, cut in 3s; one element less, in 2s
	numel := n*elems - 2
	p := Plan{Framed: true, Kind: codec.Zip3}
	r := &run{es: es, framed: true}
	long, short := r.cut(elems*es).n, r.cut((elems-1)*es).n
	if short-long <= agLead {
		t.Fatalf("segments per block %d and %d: the case does not exercise the limit", long, short)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([][]byte, n)
	for i := range xs {
		xs[i] = genData(rng, dtype.BFloat16, numel, gaussian)
	}
	want := refReduce(dtype.BFloat16, reduce.Sum, xs)
	w := conntest.NewWorld(n)
	args := make([]Args, n)
	for i := range n {
		b := clone(xs[i])
		args[i] = Args{Args: collective.Args{DType: dtype.BFloat16, Op: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}, Plan: p}
	}
	mustOK(t, w, runWorld(t, w, AllReduce, args, runOpts{}))
	for i := range n {
		sameBytes(t, fmt.Sprintf("rank %d", i), args[i].Out[0], want)
	}
}
