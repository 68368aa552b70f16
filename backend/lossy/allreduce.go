package lossy

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
	"github.com/zipccl/zipccl/backend/quant"
)

// AllReduce sums In[0] across ranks into Out[0] (collective.AllReduce's
// contract), coded as code says, and divides by avg when it is more than 1:
// a lossy two-shot. The tensor is cut into one shard per rank (whole
// blocks); the shards are reduced on their owners as ReduceScatter does,
// in float32; each owner codes its sum once (float32 values, AVG's
// division done) and the shards are all-gathered coded. Every rank, the
// owner included, decodes every shard from the same bytes, so the outputs
// are bitwise identical on every rank, each element quantized exactly twice
// on its way. On hosts both phases use the layout (ReduceScatter's and
// AllGather's).
func AllReduce(ctx context.Context, c collective.VarConn, a collective.Args, code Coding, layout [][]int, avg int) error {
	n, me := c.Size(), c.Rank()
	if len(a.In) != 1 || len(a.Out) != 1 || len(a.In[0]) != len(a.Out[0]) {
		return fmt.Errorf("lossy: all_reduce: want 1 input and 1 output of one length")
	}
	es := a.DType.Size()
	numel := len(a.Out[0]) / es
	nb := quant.Blocks(numel, Unit)
	ins, outs := make([][]byte, n), make([][]byte, n)
	for j := range n {
		lo, hi := min(numel, nb*j/n*Unit), min(numel, nb*(j+1)/n*Unit)
		ins[j], outs[j] = a.In[0][lo*es:hi*es], a.Out[0][lo*es:hi*es]
	}
	o, err := newToOwners(c, a.Pool, a.DType, code, ins, layout)
	if err != nil {
		return fmt.Errorf("lossy: all_reduce: %w", err)
	}
	// The two phases overlap: each piece of this rank's sum is coded for the
	// all-gather as soon as it is complete. Out[0] may be In[0]: a piece of
	// shard j reaches this rank's Out only after rank j summed it, which
	// needed this rank's contribution to it, read and sent by then.
	acc := make([]float32, o.numels[me])
	ready := make([]chan struct{}, o.pieces)
	for p := range ready {
		ready[p] = make(chan struct{})
	}
	wait := func(ctx context.Context, lo, hi int) error {
		for p := range o.pieces {
			plo, phi := o.span(me, p)
			if plo < hi && lo < phi {
				select {
				case <-ready[p]:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
		}
		return nil
	}
	g, gctx := workgroup.New(ctx, "lossy")
	g.Go(func() error {
		return o.run(gctx, acc, func(p, _ int, sum []float32) {
			divide(sum, avg)
			close(ready[p])
		})
	})
	g.Go(func() error {
		second := stepOffset{c, uint32(ownerPieceSteps * maxPieces)}
		ga := collective.Args{DType: a.DType, Out: outs, Pool: a.Pool, Local: a.Local}
		return gatherCoded(gctx, second, ga, code, layout, func(main []byte, lo, hi int) ([]byte, error) {
			if err := wait(gctx, lo, hi); err != nil {
				return nil, err
			}
			return quant.EncodeFloat32(main, nil, acc[lo:hi], code.Mode, code.Block)
		})
	})
	if err := g.Wait(); err != nil {
		return fmt.Errorf("lossy: all_reduce: %w", err)
	}
	return nil
}
