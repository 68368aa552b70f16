package zcoll

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// AllReduce reduces In[0] elementwise across all ranks and leaves the
// result in Out[0] on every rank, with the contract of collective.AllReduce:
// In[0] and Out[0] are normally the same memory (in place); if they are
// not, In[0] is copied to Out[0] first and left intact. The length must be
// the same on every rank.
//
// Algorithm: two-shot. The buffer is cut into N blocks of whole elements
// (block b holds numel/N elements, one more for b < numel%N, in order);
// the reduce-scatter above reduces block b on rank b (rank order, float32
// accumulation for the narrow float types), and as each segment of it is
// final, rank b's all-gather sends it round the ring (framed: coded once,
// by its owner, and forwarded unchanged). Every rank therefore ends with
// identical bits, and the result does not depend on the Plan.
//
// Everything runs as one pipeline: the all-gather of a segment starts as
// soon as it is reduced. Received segments go straight into place, over
// this rank's own contribution to them: a reduced segment exists only
// after its owner received all of that contribution, so this rank has
// finished sending (or coding) it before any byte of the result arrives.
func AllReduce(ctx context.Context, c collective.VarConn, a Args) error {
	const op = "allreduce"
	r, err := newRun(op, "twoshot", c, &a, false)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), 1); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return err
	}
	data := a.Out[0]
	if len(a.In[0]) != len(data) {
		return fmt.Errorf("zcoll: %s: In[0] has %d bytes, Out[0] %d", op, len(a.In[0]), len(data))
	}
	if err := checkReduce(op, &a, len(data)); err != nil {
		return err
	}
	if bufs.Overlaps(a.In[0], data) && !bufs.Same(a.In[0], data) {
		return fmt.Errorf("zcoll: %s: Out[0] partially overlaps In[0]", op)
	}
	if !bufs.Same(a.In[0], data) {
		copy(data, a.In[0])
	}
	if r.n == 1 || len(data) == 0 {
		return nil
	}
	if 2+r.n-1 > maxSteps {
		return fmt.Errorf("zcoll: %s: group of %d is too large", op, r.n)
	}
	blocks := bufs.Split(data, r.n, r.es)
	mine := newGates(1)[0]
	return r.reduceScatter(ctx, a.Op, blocks, blocks[r.me], rsHooks{
		reduced: func(int) { mine.advance() },
		more: func(sp spawner, ctx context.Context) {
			r.gatherRing(sp, ctx, 2, blocks, blocks[r.me], mine.wait)
		},
	})
}
