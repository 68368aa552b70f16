package comm

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/transport"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// Every rank learns the same layout from the Store, hosts of unequal size
// and interleaved ranks included.
func TestHostsFromTheStore(t *testing.T) {
	ids := []string{"b", "a", "b", "b", "c"}
	r := newRigConfig(t, len(ids), func(rank int) Config {
		return Config{Name: "hosts", Timeout: 10 * time.Second, HostID: ids[rank]}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range r.comms {
		h, err := c.Hosts(ctx)
		require.NoError(t, err)
		require.Equal(t, [][]int{{0, 2, 3}, {1}, {4}}, h)
	}
	require.Equal(t, "3 hosts: ranks 0 2 3 | 1 | 4", describeHosts([][]int{{0, 2, 3}, {1}, {4}}))
	require.Equal(t, "1 host: ranks 0 1", describeHosts([][]int{{0, 1}}))
}

// Without a host id set, ranks of one process share one host.
func TestHostsDefaultIsThisHost(t *testing.T) {
	r := newRig(t, 3, 10*time.Second)
	h, err := r.comms[1].Hosts(context.Background())
	require.NoError(t, err)
	require.Equal(t, [][]int{{0, 1, 2}}, h)
}

// A rank that never created the group: the wait ends with ctx, naming it.
func TestHostsWaitEndsWithContext(t *testing.T) {
	ep, err := transport.Listen("127.0.0.1")
	require.NoError(t, err)
	defer ep.Close()
	c, err := New(Config{Name: "alone", Rank: 0, Size: 2, Timeout: time.Second, Store: rendezvous.NewMemStore(),
		Endpoint: ep, Complete: func(uint64, int, error) {}})
	require.NoError(t, err)
	defer c.Abort("test over")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Hosts(ctx)
	require.ErrorContains(t, err, "host of rank 1")
}

// On 2 hosts of 2 ranks (interleaved), all_reduce, reduce_scatter,
// all_gather and broadcast run hierarchically: every rank gets the documented order's
// bits (within a host, then across hosts), coded or not; hierarchy=flat
// gives the flat order; ranks that disagree fail with a mismatch.
func TestHierarchicalOps(t *testing.T) {
	ids := []string{"a", "b", "a", "b"}
	hosts := [][]int{{0, 2}, {1, 3}}
	const numel = 50_003
	data := func(rank, j int) []float32 {
		rng := rand.New(rand.NewPCG(uint64(rank), uint64(j)))
		v := make([]float32, numel)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	hierSum := func(xs [][]float32) []float32 {
		out := make([]float32, numel)
		for i := range out {
			var total float32
			for h, host := range hosts {
				p := xs[host[0]][i] + xs[host[1]][i]
				if h == 0 {
					total = p
				} else {
					total += p
				}
			}
			out[i] = total
		}
		return out
	}
	for _, mode := range []string{"never", "always"} {
		t.Run(mode, func(t *testing.T) {
			r := newRigConfig(t, 4, func(rank int) Config {
				return Config{Name: "hier-" + mode, Timeout: 20 * time.Second, HostID: ids[rank], Options: map[string]string{"compress": mode, "hierarchy": "all"}}
			})
			xs := make([][]float32, 4)
			bufs := make([][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				xs[rank] = data(rank, 0)
				bufs[rank] = f32s(xs[rank]...)
				return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
			}) {
				require.NoError(t, res.err)
			}
			want := f32s(hierSum(xs)...)
			for rank := range 4 {
				require.True(t, bytes.Equal(want, bufs[rank]), "all_reduce rank %d", rank)
			}

			// reduce_scatter: block j of every rank, reduced on rank j
			outs := make([][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				in := make([][]byte, 4)
				for j := range in {
					in[j] = f32s(data(rank, 10+j)...)
				}
				outs[rank] = make([]byte, 4*numel)
				return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, In: in, Out: [][]byte{outs[rank]}}
			}) {
				require.NoError(t, res.err)
			}
			for j := range 4 {
				contrib := make([][]float32, 4)
				for rank := range contrib {
					contrib[rank] = data(rank, 10+j)
				}
				require.True(t, bytes.Equal(f32s(hierSum(contrib)...), outs[j]), "reduce_scatter block %d", j)
			}

			// all_gather: bytes only
			gathered := make([][][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				gathered[rank] = make([][]byte, 4)
				for j := range gathered[rank] {
					gathered[rank][j] = make([]byte, 4*numel)
				}
				return &Op{Kind: opkind.AllGather, DType: dtype.Float32, In: [][]byte{f32s(data(rank, 20)...)}, Out: gathered[rank]}
			}) {
				require.NoError(t, res.err)
			}
			for rank := range 4 {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(data(j, 20)...), gathered[rank][j]), "all_gather rank %d shard %d", rank, j)
				}
			}

			// broadcast from rank 1: the chain host by host, the root's bytes
			bc := make([][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				bc[rank] = make([]byte, 4*numel)
				if rank == 1 {
					copy(bc[rank], f32s(data(1, 30)...))
				}
				return &Op{Kind: opkind.Broadcast, DType: dtype.Float32, Root: 1, In: [][]byte{bc[rank]}, Out: [][]byte{bc[rank]}}
			}) {
				require.NoError(t, res.err)
			}
			for rank := range 4 {
				require.True(t, bytes.Equal(f32s(data(1, 30)...), bc[rank]), "broadcast rank %d", rank)
			}

			// all_to_all: uneven splits, rank 3 sending rank 0 nothing
			split := func(r, j int) int {
				if r == 3 && j == 0 {
					return 0
				}
				return 4 * (1000*(r+1) + 17*j)
			}
			block := func(r, j int) []byte { return f32s(data(r, 40+j)...)[:split(r, j)] }
			a2a := make([][][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				in := make([][]byte, 4)
				a2a[rank] = make([][]byte, 4)
				for j := range in {
					in[j] = block(rank, j)
					a2a[rank][j] = make([]byte, split(j, rank))
				}
				return &Op{Kind: opkind.AllToAll, DType: dtype.Float32, In: in, Out: a2a[rank]}
			}) {
				require.NoError(t, res.err)
			}
			for rank := range 4 {
				for j := range 4 {
					require.True(t, bytes.Equal(block(j, rank), a2a[rank][j]), "all_to_all rank %d block from %d", rank, j)
				}
			}
		})
	}

	t.Run("flat and mismatch", func(t *testing.T) {
		run := func(name string, ids []string, flat func(rank int) bool) ([][]byte, []result) {
			r := newRigConfig(t, 4, func(rank int) Config {
				opts := map[string]string{}
				if flat(rank) {
					opts["hierarchy"] = "flat"
				}
				return Config{Name: "hier-" + name, Timeout: 5 * time.Second, HostID: ids[rank], Options: opts}
			})
			bufs := make([][]byte, 4)
			res := r.everyRank(func(rank int) *Op {
				bufs[rank] = f32s(data(rank, 0)...)
				return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
			})
			return bufs, res
		}
		_, res := run("mismatch", ids, func(rank int) bool { return rank == 3 })
		for rank, x := range res {
			require.ErrorContains(t, x.err, "hierarchical", "rank %d", rank)
		}
		// hierarchy=all runs all_to_all hierarchically: a rank left at auto
		// (flat all_to_all) or flat fails it; all at auto agree
		for _, other := range []string{"auto", "flat", "all"} {
			r := newRigConfig(t, 4, func(rank int) Config {
				opts := map[string]string{"hierarchy": "all"}
				if rank == 3 || other == "auto" && rank != 0 {
					opts["hierarchy"] = other
				}
				return Config{Name: "hier-a2a-" + other, Timeout: 5 * time.Second, HostID: ids[rank], Options: opts}
			})
			for rank, x := range r.everyRank(func(rank int) *Op {
				in, out := make([][]byte, 4), make([][]byte, 4)
				for j := range in {
					in[j], out[j] = make([]byte, 64), make([]byte, 64)
				}
				return &Op{Kind: opkind.AllToAll, DType: dtype.Float32, In: in, Out: out}
			}) {
				if other == "all" {
					require.NoError(t, x.err, "all_to_all rank %d", rank)
				} else {
					require.ErrorContains(t, x.err, "hierarchical", "all_to_all, rank 3 %s, rank %d", other, rank)
				}
			}
		}
		flat, res := run("flat", ids, func(int) bool { return true })
		oneHost, res2 := run("one-host", []string{"x", "x", "x", "x"}, func(int) bool { return false })
		hier := make([][]float32, 4)
		for rank := range hier {
			hier[rank] = data(rank, 0)
		}
		for rank := range 4 {
			require.NoError(t, res[rank].err)
			require.NoError(t, res2[rank].err)
			require.True(t, bytes.Equal(oneHost[rank], flat[rank]), "hierarchy=flat runs the flat algorithm, rank %d", rank)
			require.False(t, bytes.Equal(f32s(hierSum(hier)...), flat[rank]), "and not the hierarchical order, rank %d", rank)
		}
	})
}

// On 2 hosts of 2 ranks, a rank that dies inside a host, or a whole host,
// fails every survivor's hierarchical all_reduce or all_to_all promptly, naming a dead
// rank, though a survivor need not talk to it directly (rank 2's rail
// partner is rank 0, its host partner rank 3).
func TestHierarchicalDeadRankOrHost(t *testing.T) {
	ids := []string{"a", "a", "b", "b"}
	for _, c := range []struct {
		kind opkind.Kind
		dead []int
	}{{opkind.AllReduce, []int{1}}, {opkind.AllReduce, []int{2, 3}}, {opkind.AllToAll, []int{1}}, {opkind.AllToAll, []int{2, 3}}} {
		kind, dead := c.kind, c.dead
		t.Run(fmt.Sprint(kind, dead), func(t *testing.T) {
			r := newRigConfig(t, 4, func(rank int) Config {
				return Config{Name: "hier-dead", Timeout: 60 * time.Second, HostID: ids[rank], Options: map[string]string{"compress": "always", "hierarchy": "all"}}
			})
			bufs := make([][]byte, 4)
			op := func(rank int) *Op {
				return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
			}
			if kind == opkind.AllToAll {
				op = func(rank int) *Op {
					in, out := make([][]byte, 4), make([][]byte, 4)
					for j := range in {
						in[j], out[j] = bufs[rank][j<<21:(j+1)<<21], make([]byte, 2<<20)
					}
					return &Op{Kind: opkind.AllToAll, DType: dtype.Float32, In: in, Out: out}
				}
			}
			for _, x := range r.everyRank(func(rank int) *Op {
				bufs[rank] = make([]byte, 8<<20)
				return op(rank)
			}) {
				require.NoError(t, x.err)
			}
			chans := map[int]chan result{}
			for rank := range 4 {
				if !slices.Contains(dead, rank) {
					chans[rank] = r.submit(rank, op(rank))
				}
			}
			time.Sleep(20 * time.Millisecond)
			for _, d := range dead {
				r.comms[d].mesh.Abort(fmt.Errorf("simulated crash"))
			}
			start := time.Now()
			for rank, ch := range chans {
				err := wait(t, ch).err
				require.Error(t, err, "rank %d", rank)
				named := false
				for _, d := range dead {
					named = named || strings.Contains(err.Error(), fmt.Sprintf("rank %d", d))
				}
				require.True(t, named, "rank %d names a dead rank: %v", rank, err)
			}
			require.Less(t, time.Since(start), 10*time.Second, "survivors must not wait for the 60s timeout")
		})
	}
}

// The switcher costs a hierarchical op's rail part: H ranks, the R-th of
// the payload (an all_to_all: all of it), the key its feedback times the
// call under.
func TestHierarchicalDecisionCostsTheRail(t *testing.T) {
	r := newRigConfig(t, 4, func(rank int) Config {
		return Config{Name: "hier-decide", Timeout: 5 * time.Second, HostID: []string{"a", "a", "b", "b"}[rank],
			Options: map[string]string{"compress": "auto"}}
	})
	c := r.comms[0]
	op := &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: [][]byte{make([]byte, 64<<20)}}
	flat, hier := &task{op: op}, &task{op: op, hosts: zcoll.Hosts{{0, 1}, {2, 3}}}
	c.decide(op, flat, 64<<20)
	c.decide(op, hier, 64<<20)
	require.Equal(t, 64<<20, flat.key.Bytes)
	require.Equal(t, 32<<20, hier.key.Bytes)
	// an all_to_all's rail rank sends its payload's off-host part, as an
	// H-rank all_to_all of the whole payload does
	a2a := &Op{Kind: opkind.AllToAll, DType: dtype.BFloat16, In: [][]byte{make([]byte, 32<<20), make([]byte, 32<<20)}}
	hierA2A := &task{op: a2a, hosts: zcoll.Hosts{{0, 1}, {2, 3}}}
	c.decide(a2a, hierA2A, 64<<20)
	require.Equal(t, 64<<20, hierA2A.key.Bytes)
}

// Hosts of 3 and 1 ranks (interleaved): all_reduce runs hierarchically
// (within each host, then across, on the one rail), coded or not; with
// hierarchy=all reduce_scatter does too and all_gather delivers every
// shard; all_to_all, which takes equal hosts only, runs flat even then.
// At the default (auto) reduce_scatter runs flat.
func TestHierarchicalUnequalHosts(t *testing.T) {
	const numel = 30_001
	data := func(rank, j int) []float32 {
		rng := rand.New(rand.NewPCG(uint64(rank)+100, uint64(j)))
		v := make([]float32, numel)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	hierSum := func(x [][]float32) []byte {
		out := make([]float32, numel)
		for i := range out {
			out[i] = ((x[0][i] + x[2][i]) + x[3][i]) + x[1][i] // host {0, 2, 3}, then host {1}
		}
		return f32s(out...)
	}
	x := [][]float32{data(0, 0), data(1, 0), data(2, 0), data(3, 0)}
	flat := make([]float32, numel)
	for i := range flat {
		flat[i] = ((x[0][i] + x[1][i]) + x[2][i]) + x[3][i]
	}
	require.False(t, bytes.Equal(hierSum(x), f32s(flat...)), "the data tells the two orders apart")
	reduceScatter := func(name string, ids []string, hierarchy string) [][]byte {
		r := newRigConfig(t, 4, func(rank int) Config {
			return Config{Name: name, Timeout: 20 * time.Second, HostID: ids[rank], Options: map[string]string{"hierarchy": hierarchy}}
		})
		outs := make([][]byte, 4)
		for _, res := range r.everyRank(func(rank int) *Op {
			in := make([][]byte, 4)
			for j := range in {
				in[j] = f32s(data(rank, 10+j)...)
			}
			outs[rank] = make([]byte, 4*numel)
			return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, In: in, Out: [][]byte{outs[rank]}}
		}) {
			require.NoError(t, res.err)
		}
		return outs
	}
	oneHost := reduceScatter("unequal-one-host", []string{"x", "x", "x", "x"}, "auto")
	auto := reduceScatter("unequal-auto", []string{"a", "b", "a", "a"}, "auto")
	for j := range 4 {
		require.True(t, bytes.Equal(oneHost[j], auto[j]), "reduce_scatter block %d runs flat by default", j)
	}
	for _, mode := range []string{"never", "always"} {
		t.Run(mode, func(t *testing.T) {
			ids := []string{"a", "b", "a", "a"}
			r := newRigConfig(t, 4, func(rank int) Config {
				return Config{Name: "unequal-" + mode, Timeout: 20 * time.Second, HostID: ids[rank],
					Options: map[string]string{"compress": mode, "hierarchy": "all"}}
			})
			bufs := make([][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				bufs[rank] = f32s(x[rank]...)
				return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
			}) {
				require.NoError(t, res.err)
			}
			for rank := range 4 {
				require.True(t, bytes.Equal(hierSum(x), bufs[rank]), "all_reduce rank %d", rank)
			}
			outs := make([][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				in := make([][]byte, 4)
				for j := range in {
					in[j] = f32s(data(rank, 10+j)...)
				}
				outs[rank] = make([]byte, 4*numel)
				return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, In: in, Out: [][]byte{outs[rank]}}
			}) {
				require.NoError(t, res.err)
			}
			for j := range 4 {
				contrib := [][]float32{data(0, 10+j), data(1, 10+j), data(2, 10+j), data(3, 10+j)}
				require.True(t, bytes.Equal(hierSum(contrib), outs[j]), "reduce_scatter block %d", j)
			}
			gathered := make([][][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				gathered[rank] = make([][]byte, 4)
				for j := range gathered[rank] {
					gathered[rank][j] = make([]byte, 4*(numel-j))
				}
				return &Op{Kind: opkind.AllGather, DType: dtype.Float32, In: [][]byte{f32s(data(rank, 20)[:numel-rank]...)}, Out: gathered[rank]}
			}) {
				require.NoError(t, res.err)
			}
			for rank := range 4 {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(data(j, 20)[:numel-j]...), gathered[rank][j]), "all_gather rank %d shard %d", rank, j)
				}
			}
			a2a := make([][][]byte, 4)
			for _, res := range r.everyRank(func(rank int) *Op {
				in, out := make([][]byte, 4), make([][]byte, 4)
				for j := range in {
					in[j] = f32s(data(rank, 40+j)[:100]...)
					out[j] = make([]byte, 400)
				}
				a2a[rank] = out
				return &Op{Kind: opkind.AllToAll, DType: dtype.Float32, In: in, Out: out}
			}) {
				require.NoError(t, res.err)
			}
			for rank := range 4 {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(data(j, 40+rank)[:100]...), a2a[rank][j]), "all_to_all rank %d block from %d", rank, j)
				}
			}
		})
	}
}
