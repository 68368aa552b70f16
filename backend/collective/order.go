package collective

import (
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/reduce"
)

// reduceInOrder sets dst = (((xs[0] op xs[1]) op xs[2]) ... op xs[n-1]),
// the rank-order association used by every direct (one-round) reduction.
// dst may be one of the xs: an operand that dst overlaps is copied aside
// first unless it is consumed before dst is first written (xs[0], xs[1]).
func reduceInOrder(dt dtype.DType, op reduce.Op, pool *Pool, dst []byte, xs [][]byte) {
	if len(xs) == 1 {
		if !bufs.Same(dst, xs[0]) {
			copy(dst, xs[0])
		}
		return
	}
	var aside [][]byte
	for i := 2; i < len(xs); i++ {
		if bufs.Overlaps(dst, xs[i]) {
			b := pool.Get(len(xs[i]))
			copy(b, xs[i])
			xs[i] = b
			aside = append(aside, b)
		}
	}
	reduce.Reduce3(dt, op, dst, xs[0], xs[1])
	for _, x := range xs[2:] {
		reduce.Reduce(dt, op, dst, x)
	}
	for _, b := range aside {
		pool.Put(b)
	}
}
