package lossy

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
)

// ReduceScatter sums block j of every rank (In[j], one per rank, all of
// Out[0]'s length) into Out[0] on rank j, coded as code says on the way, and
// divides by avg when it is more than 1 (AVG): collective.ReduceScatter's
// contract, with the error of one quantization of each contribution that
// crosses a host (toOwners). The sum is in float32, in an order fixed by
// the layout, and is rounded to the dtype once. Out[0] may be In[me].
func ReduceScatter(ctx context.Context, c collective.VarConn, a collective.Args, code Coding, layout [][]int, avg int) error {
	n := c.Size()
	if len(a.In) != n || len(a.Out) != 1 {
		return fmt.Errorf("lossy: reduce_scatter: want %d inputs and 1 output", n)
	}
	for j, in := range a.In {
		if len(in) != len(a.Out[0]) {
			return fmt.Errorf("lossy: reduce_scatter: In[%d] has %d bytes, Out[0] %d", j, len(in), len(a.Out[0]))
		}
	}
	o, err := newToOwners(c, a.Pool, a.DType, code, a.In, layout)
	if err != nil {
		return fmt.Errorf("lossy: reduce_scatter: %w", err)
	}
	// Each piece is finished into Out[0] when its sum is complete: the
	// input it overwrites in place (In[me]'s piece) has been read by then.
	es := a.DType.Size()
	err = o.run(ctx, nil, func(_, lo int, sum []float32) {
		finish(a.DType, a.Out[0][lo*es:(lo+len(sum))*es], sum, avg)
	})
	if err != nil {
		return fmt.Errorf("lossy: reduce_scatter: %w", err)
	}
	return nil
}
