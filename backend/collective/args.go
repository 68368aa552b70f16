package collective

import (
	"fmt"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
)

// Args are the operands of one collective. Which fields are used, and how
// In and Out are laid out, is described on each operation.
//
// The collectives never retain In, Out or their slices after returning.
type Args struct {
	DType dtype.DType // element type; reductions split and reduce on its boundaries
	Op    reduce.Op   // reductions only: Sum, Product, Min, Max, BAnd, BOr or BXor
	Root  int         // rooted operations only
	In    [][]byte    // inputs; read-only unless an operation says otherwise
	Out   [][]byte    // outputs
	Pool  *Pool       // scratch buffers; nil allocates on demand
}

// checkComm validates the communicator and, for rooted operations, the root.
func checkComm(op string, c Conn, root int, rooted bool) (n, me int, err error) {
	n, me = c.Size(), c.Rank()
	if n < 1 || me < 0 || me >= n {
		return 0, 0, fmt.Errorf("collective: %s: invalid rank %d in group of %d", op, me, n)
	}
	if rooted && (root < 0 || root >= n) {
		return 0, 0, fmt.Errorf("collective: %s: root %d out of range for group of %d", op, root, n)
	}
	return n, me, nil
}

// checkReduce validates a reduction's dtype and op and returns the element
// size. AVG and PREMUL_SUM are rejected: the engine turns them into SUM (plus
// a local scaling) before calling, so seeing one here is a caller bug that
// would otherwise silently produce a plain sum.
func checkReduce(op string, a Args, lens ...int) (int, error) {
	if a.Op == reduce.Avg || a.Op == reduce.PreMulSum {
		return 0, fmt.Errorf("collective: %s: reduce op %v must be resolved by the engine", op, a.Op)
	}
	if err := reduce.Check(a.DType, a.Op); err != nil {
		return 0, fmt.Errorf("collective: %s: %w", op, err)
	}
	es := a.DType.Size()
	for _, l := range lens {
		if l%es != 0 {
			return 0, fmt.Errorf("collective: %s: buffer of %d bytes is not a whole number of %s elements", op, l, a.DType)
		}
	}
	return es, nil
}

// granOf is the segment granularity for operations that only copy: whole
// elements when the dtype is known, else bytes (copies never need more).
func granOf(dt dtype.DType) int {
	return max(dt.Size(), 1)
}

func need(op, what string, got, want int) error {
	if got != want {
		return fmt.Errorf("collective: %s: %s has %d buffers, want %d", op, what, got, want)
	}
	return nil
}

// overlaps reports whether a and b share any byte of memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// checkAlias rejects an output that overlaps an input other than by being
// exactly ins[self] (the in-place form): the reduction kernels read inputs
// after parts of the output are written, so any other overlap would
// corrupt the result.
func checkAlias(op string, out []byte, ins [][]byte, self int) error {
	for j, in := range ins {
		if overlaps(out, in) && !(j == self && same(out, in)) {
			return fmt.Errorf("collective: %s: Out[0] partially overlaps In[%d]", op, j)
		}
	}
	return nil
}

// same reports whether a and b are the same memory (or both empty).
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}
