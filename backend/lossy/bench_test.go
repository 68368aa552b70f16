package lossy

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/quant"
)

// BenchmarkReduceScatterInt4 is a 4-rank int4 reduce_scatter of 64 MiB of
// bfloat16 per rank over the in-memory world, one hop and on 2 hosts of 2
// ranks: the coding's cost without a network (bytes: the ranks' input).
func BenchmarkReduceScatterInt4(b *testing.B) {
	b.Run("one-hop", func(b *testing.B) { benchReduceScatter(b, nil) })
	b.Run("2x2", func(b *testing.B) { benchReduceScatter(b, [][]int{{0, 1}, {2, 3}}) })
}

func benchReduceScatter(b *testing.B, hosts [][]int) {
	const n, numel = 4, 1 << 23 // per shard
	rng := rand.New(rand.NewPCG(1, 1))
	ins := make([][][]byte, n)
	for r := range n {
		for range n {
			xs := make([]float32, numel)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64() * 0.02)
			}
			buf := make([]byte, 2*numel)
			putFloats(dtype.BFloat16, buf, xs)
			ins[r] = append(ins[r], buf)
		}
	}
	outs := make([][]byte, n)
	for r := range outs {
		outs[r] = make([]byte, 2*numel)
	}
	pool := collective.NewPool()
	b.SetBytes(int64(n * 2 * numel))
	for b.Loop() {
		world(b, n, func(ctx context.Context, c collective.VarConn) error {
			r := c.Rank()
			return ReduceScatter(ctx, c, collective.Args{DType: dtype.BFloat16, In: ins[r], Out: [][]byte{outs[r]}, Pool: pool}, coding(quant.Int4), hosts, 1)
		})
	}
}
