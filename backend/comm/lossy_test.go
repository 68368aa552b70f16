package comm

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
)

func gatherOp(rank, n, numel int, seed uint64) *Op {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	in := make([]float32, numel)
	for i := range in {
		in[i] = float32(rng.NormFloat64())
	}
	out := make([][]byte, n)
	for j := range out {
		out[j] = make([]byte, 4*numel)
	}
	return &Op{Kind: opkind.AllGather, DType: dtype.Float32, In: [][]byte{f32s(in...)}, Out: out}
}

// A lossy all_gather through the engine: identical outputs on every rank,
// lossy (not the input bytes) yet within the int8 bound; a tensor below
// min_bytes stays exact; stats count the lossy call.
func TestLossyAllGather(t *testing.T) {
	const n, numel = 3, 5000
	r := newRigWith(t, n, "lossy", 20*time.Second, func(int) map[string]string {
		return map[string]string{"lossy": "all_gather=int8,min_bytes=4096"}
	})
	ops := make([]*Op, n)
	res := r.everyRank(func(rank int) *Op { ops[rank] = gatherOp(rank, n, numel, 1); return ops[rank] })
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d", rank)
	}
	for j := range n {
		for rank := 1; rank < n; rank++ {
			require.Equal(t, ops[0].Out[j], ops[rank].Out[j], "rank %d's shard %d", rank, j)
		}
		src := ops[j].In[0]
		require.NotEqual(t, src, ops[0].Out[j], "shard %d was coded lossily", j)
		for i := range numel {
			require.InDelta(t, f32at(src, i), f32at(ops[0].Out[j], i), 5.0/127*0.51, "shard %d element %d", j, i)
		}
	}
	// below min_bytes: exact
	res = r.everyRank(func(rank int) *Op { ops[rank] = gatherOp(rank, n, 100, 2); return ops[rank] })
	for rank, x := range res {
		require.NoError(t, x.err)
		for j := range n {
			require.Equal(t, ops[j].In[0], ops[rank].Out[j])
		}
	}
	var st struct {
		Ops map[string]OpStats `json:"ops"`
	}
	js, err := r.comms[0].Stats()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &st))
	require.Equal(t, int64(1), st.Ops["all_gather"].LossyCalls["int8"])
	require.Equal(t, int64(4*numel), st.Ops["all_gather"].LossyBytes["int8"])
	require.Equal(t, int64(2), st.Ops["all_gather"].Count)
}

// Ranks whose policies differ fail the op on every rank, naming the
// policy; after SetLossy makes them agree the group works again. Ops the
// policy does not cover are unaffected by the difference.
func TestLossyPolicyMismatch(t *testing.T) {
	const n = 3
	r := newRig(t, n, 20*time.Second)
	require.NoError(t, r.comms[1].SetLossy("all_gather=int8"))
	res := r.everyRank(func(rank int) *Op { return gatherOp(rank, n, 1<<15, 3) })
	requireAllFail(t, res, CodeMismatch, "lossy policy int8 from 65536 bytes")

	bufs := make([][]byte, n)
	res = r.everyRank(func(rank int) *Op {
		bufs[rank] = f32s(1, 2)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	})
	for _, x := range res {
		require.NoError(t, x.err, "all_reduce is not under the policy")
	}

	for _, c := range r.comms {
		require.NoError(t, c.SetLossy("all_gather=int8"))
	}
	res = r.everyRank(func(rank int) *Op { return gatherOp(rank, n, 1<<15, 4) })
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d", rank)
	}
	require.ErrorContains(t, r.comms[0].SetLossy("all_gather=int4"), "makes no sense")
	require.Equal(t, "all_gather=int8,min_bytes=65536", r.comms[0].Policy().String(), "a refused policy changes nothing")
}

func TestLossyEnvAndOption(t *testing.T) {
	t.Setenv("ZIPCCL_LOSSY", "all_gather=int8,min_bytes=1")
	r := newRigWith(t, 2, "env", 5*time.Second, func(rank int) map[string]string {
		if rank == 1 {
			return map[string]string{"lossy": ""} // the option wins over the environment
		}
		return nil
	})
	require.Equal(t, "all_gather=int8,min_bytes=1", r.comms[0].Policy().String())
	require.Equal(t, "lossless", r.comms[1].Policy().String())
	t.Setenv("ZIPCCL_LOSSY", "all_reduce=fp8,fp8_block=48")
	_, err := New(Config{Rank: 0, Size: 1, Options: nil})
	require.ErrorContains(t, err, "fp8_block")
}

// Lossy reductions through the engine: all_reduce AVG gives every rank the
// same bytes, coded (not the exact average) and near it; reduce_scatter
// int4 leaves each owner near its exact sum; MAX stays exact under the
// policy; stats count the lossy calls per mode.
func TestLossyReductions(t *testing.T) {
	const n, numel = 4, 6000
	r := newRigWith(t, n, "lossy-red", 20*time.Second, func(int) map[string]string {
		return map[string]string{"lossy": "all_reduce=int8,reduce_scatter=int4,min_bytes=4096"}
	})
	vals := func(rank, numel int, seed uint64) []float32 {
		rng := rand.New(rand.NewPCG(seed, uint64(rank)))
		xs := make([]float32, numel)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		return xs
	}
	for _, op := range []reduce.Op{reduce.Avg, reduce.Max} {
		bufs := make([][]byte, n)
		res := r.everyRank(func(rank int) *Op {
			bufs[rank] = f32s(vals(rank, numel, 5)...)
			return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: op, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
		})
		exact := make([]float64, numel)
		for rank := range n {
			for i, v := range vals(rank, numel, 5) {
				if op == reduce.Avg {
					exact[i] += float64(v) / n
				} else if rank == 0 || float64(v) > exact[i] {
					exact[i] = float64(v)
				}
			}
		}
		same := true
		for rank, x := range res {
			require.NoError(t, x.err, "rank %d", rank)
			require.Equal(t, bufs[0], bufs[rank], "%v: rank %d", op, rank)
		}
		for i := range numel {
			got := float64(f32at(bufs[0], i))
			same = same && got == float64(float32(exact[i]))
			require.InDelta(t, exact[i], got, 0.1, "%v element %d", op, i) // |x| < ~5: 2 int8 codings
		}
		require.Equal(t, op == reduce.Max, same, "%v: exact only for MAX", op)
	}
	outs := make([][]byte, n)
	res := r.everyRank(func(rank int) *Op {
		in := make([][]byte, n)
		for j := range n {
			in[j] = f32s(vals(rank, numel, uint64(10+j))...)
		}
		outs[rank] = make([]byte, 4*numel)
		return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, In: in, Out: [][]byte{outs[rank]}}
	})
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d", rank)
		sums := make([]float64, numel)
		for src := range n {
			for i, v := range vals(src, numel, uint64(10+rank)) {
				sums[i] += float64(v)
			}
		}
		for i, sum := range sums {
			require.InDelta(t, sum, float64(f32at(outs[rank], i)), 3*0.5*5.5/7, "rank %d element %d", rank, i)
		}
	}
	var st struct {
		Ops map[string]OpStats `json:"ops"`
	}
	js, err := r.comms[0].Stats()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &st))
	require.Equal(t, int64(1), st.Ops["all_reduce"].LossyCalls["int8"])
	require.Equal(t, int64(2), st.Ops["all_reduce"].Count)
	require.Equal(t, int64(1), st.Ops["reduce_scatter"].LossyCalls["int4"])
}

// Ranks whose reduce_scatter modes differ (int4 against int8) fail the op
// on every rank, naming the policy; all_reduce, not under either policy,
// runs.
func TestLossyReductionModeMismatch(t *testing.T) {
	const n, numel = 3, 1 << 13
	r := newRig(t, n, 20*time.Second)
	for rank, c := range r.comms {
		mode := "int4"
		if rank == 2 {
			mode = "int8"
		}
		require.NoError(t, c.SetLossy("reduce_scatter="+mode+",min_bytes=0"))
	}
	rs := func(rank int) *Op {
		in := make([][]byte, n)
		for j := range in {
			in[j] = make([]byte, 4*numel)
		}
		return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, In: in,
			Out: [][]byte{make([]byte, 4*numel)}}
	}
	requireAllFail(t, r.everyRank(rs), CodeMismatch, "lossy policy int")
	res := r.everyRank(func(rank int) *Op {
		b := f32s(1, 2, 3)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}
	})
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d", rank)
	}
}

// fp8 through the engine, as tensor parallelism uses it: all_reduce SUM
// gives every rank the same bytes within TACO's error of the exact sum,
// all_gather and reduce_scatter code too, stats count "fp8"; ranks whose
// fp8 blocks differ fail naming the block.
func TestLossyFP8(t *testing.T) {
	const n, numel = 4, 5000
	r := newRigWith(t, n, "lossy-fp8", 20*time.Second, func(int) map[string]string {
		return map[string]string{"lossy": "all_reduce=fp8,all_gather=fp8,reduce_scatter=fp8,fp8_block=128,min_bytes=0"}
	})
	vals := func(rank int, seed uint64) []float32 {
		rng := rand.New(rand.NewPCG(seed, uint64(rank)))
		xs := make([]float32, numel)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		return xs
	}
	bufs := make([][]byte, n)
	res := r.everyRank(func(rank int) *Op {
		bufs[rank] = f32s(vals(rank, 7)...)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	})
	var num, den float64
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d", rank)
		require.Equal(t, bufs[0], bufs[rank], "rank %d", rank)
	}
	sum := make([]float64, numel)
	for rank := range n {
		for i, v := range vals(rank, 7) {
			sum[i] += float64(v)
		}
	}
	for i, want := range sum {
		d := float64(f32at(bufs[0], i)) - want
		num, den = num+d*d, den+want*want
	}
	rel := math.Sqrt(num / den)
	require.Less(t, rel, 0.045, "relative L2 error of the two-shot")
	require.Greater(t, rel, 1e-4, "coded, not exact")

	gathered := make([]*Op, n)
	res = r.everyRank(func(rank int) *Op {
		gathered[rank] = gatherOp(rank, n, numel, 9)
		return gathered[rank]
	})
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d", rank)
		require.Equal(t, gathered[0].Out, gathered[rank].Out, "all_gather: rank %d", rank)
		require.NotEqual(t, gathered[rank].In[0], gathered[rank].Out[rank], "all_gather: coded, the owner's shard too")
	}
	st := opStats(t, r.comms[0])
	require.Equal(t, int64(1), st["all_reduce"].LossyCalls["fp8"])
	require.Equal(t, int64(1), st["all_gather"].LossyCalls["fp8"])

	require.NoError(t, r.comms[3].SetLossy("all_reduce=fp8,min_bytes=0"))
	res = r.everyRank(func(rank int) *Op {
		b := f32s(vals(rank, 7)...)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}
	})
	requireAllFail(t, res, CodeMismatch, "lossy policy fp8 (block 128)")
}
