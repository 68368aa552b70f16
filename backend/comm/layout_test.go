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
	data := func(rank, j int) []float32 { return normalsF32(uint64(rank), uint64(j), numel) }
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
			xs := [][]float32{data(0, 0), data(1, 0), data(2, 0), data(3, 0)}
			want := f32s(hierSum(xs)...)
			for rank, got := range allReduceF32(t, r, xs) {
				require.True(t, bytes.Equal(want, got), "all_reduce rank %d", rank)
			}

			// reduce_scatter: block j of every rank, reduced on rank j
			outs := reduceScatterF32(t, r, func(rank, j int) []float32 { return data(rank, 10+j) })
			for j := range 4 {
				contrib := make([][]float32, 4)
				for rank := range contrib {
					contrib[rank] = data(rank, 10+j)
				}
				require.True(t, bytes.Equal(f32s(hierSum(contrib)...), outs[j]), "reduce_scatter block %d", j)
			}

			// all_gather: bytes only
			for rank, got := range allGatherF32(t, r, func(rank int) []float32 { return data(rank, 20) }) {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(data(j, 20)...), got[j]), "all_gather rank %d shard %d", rank, j)
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
			block := func(r, j int) []float32 {
				if r == 3 && j == 0 {
					return nil
				}
				return data(r, 40+j)[:1000*(r+1)+17*j]
			}
			for rank, got := range allToAllF32(t, r, block) {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(block(j, rank)...), got[j]), "all_to_all rank %d block from %d", rank, j)
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
	data := func(rank, j int) []float32 { return normalsF32(uint64(rank)+100, uint64(j), numel) }
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
	rsIn := func(rank, j int) []float32 { return data(rank, 10+j) }
	rig := func(name string, ids []string, opts map[string]string) *rig {
		return newRigConfig(t, 4, func(rank int) Config {
			return Config{Name: name, Timeout: 20 * time.Second, HostID: ids[rank], Options: opts}
		})
	}
	oneHost := reduceScatterF32(t, rig("unequal-one-host", []string{"x", "x", "x", "x"}, nil), rsIn)
	auto := reduceScatterF32(t, rig("unequal-auto", []string{"a", "b", "a", "a"}, nil), rsIn)
	for j := range 4 {
		require.True(t, bytes.Equal(oneHost[j], auto[j]), "reduce_scatter block %d runs flat by default", j)
	}
	for _, mode := range []string{"never", "always"} {
		t.Run(mode, func(t *testing.T) {
			r := rig("unequal-"+mode, []string{"a", "b", "a", "a"}, map[string]string{"compress": mode, "hierarchy": "all"})
			for rank, got := range allReduceF32(t, r, x) {
				require.True(t, bytes.Equal(hierSum(x), got), "all_reduce rank %d", rank)
			}
			outs := reduceScatterF32(t, r, rsIn)
			for j := range 4 {
				contrib := [][]float32{rsIn(0, j), rsIn(1, j), rsIn(2, j), rsIn(3, j)}
				require.True(t, bytes.Equal(hierSum(contrib), outs[j]), "reduce_scatter block %d", j)
			}
			shard := func(rank int) []float32 { return data(rank, 20)[:numel-rank] }
			for rank, got := range allGatherF32(t, r, shard) {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(shard(j)...), got[j]), "all_gather rank %d shard %d", rank, j)
				}
			}
			block := func(from, to int) []float32 { return data(from, 40+to)[:100] }
			for rank, got := range allToAllF32(t, r, block) {
				for j := range 4 {
					require.True(t, bytes.Equal(f32s(block(j, rank)...), got[j]), "all_to_all rank %d block from %d", rank, j)
				}
			}
		})
	}
}

// normalsF32 is n standard normal float32s, seeded by (a, b).
func normalsF32(a, b uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(a, b))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// allReduceF32 sums xs[rank] over every rank of r and returns each rank's
// result.
func allReduceF32(t *testing.T, r *rig, xs [][]float32) [][]byte {
	bufs := make([][]byte, len(xs))
	for _, res := range r.everyRank(func(rank int) *Op {
		bufs[rank] = f32s(xs[rank]...)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	}) {
		require.NoError(t, res.err)
	}
	return bufs
}

// reduceScatterF32 reduces in(rank, j) over the ranks onto rank j and
// returns each rank's block.
func reduceScatterF32(t *testing.T, r *rig, in func(rank, j int) []float32) [][]byte {
	n := len(r.comms)
	outs := make([][]byte, n)
	for _, res := range r.everyRank(func(rank int) *Op {
		ins := make([][]byte, n)
		for j := range ins {
			ins[j] = f32s(in(rank, j)...)
		}
		outs[rank] = make([]byte, len(ins[rank]))
		return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, In: ins, Out: [][]byte{outs[rank]}}
	}) {
		require.NoError(t, res.err)
	}
	return outs
}

// allGatherF32 gathers shard(rank) from every rank and returns what each
// rank got.
func allGatherF32(t *testing.T, r *rig, shard func(rank int) []float32) [][][]byte {
	n := len(r.comms)
	got := make([][][]byte, n)
	for _, res := range r.everyRank(func(rank int) *Op {
		got[rank] = make([][]byte, n)
		for j := range got[rank] {
			got[rank][j] = make([]byte, 4*len(shard(j)))
		}
		return &Op{Kind: opkind.AllGather, DType: dtype.Float32, In: [][]byte{f32s(shard(rank)...)}, Out: got[rank]}
	}) {
		require.NoError(t, res.err)
	}
	return got
}

// allToAllF32 sends block(from, to) from every rank to every rank and
// returns what each rank got, by sender.
func allToAllF32(t *testing.T, r *rig, block func(from, to int) []float32) [][][]byte {
	n := len(r.comms)
	got := make([][][]byte, n)
	for _, res := range r.everyRank(func(rank int) *Op {
		in := make([][]byte, n)
		got[rank] = make([][]byte, n)
		for j := range in {
			in[j] = f32s(block(rank, j)...)
			got[rank][j] = make([]byte, 4*len(block(j, rank)))
		}
		return &Op{Kind: opkind.AllToAll, DType: dtype.Float32, In: in, Out: got[rank]}
	}) {
		require.NoError(t, res.err)
	}
	return got
}
