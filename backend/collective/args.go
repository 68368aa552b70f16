package collective

import (
	"fmt"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
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
	// Local says every peer is on this host, so a "link" is a memory copy
	// on cores the ranks share. Broadcast then uses a binomial tree of
	// whole-buffer messages instead of the pipelined chain. It changes
	// the messages, so every rank must pass the same value.
	Local bool
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

// checkReduce validates a reduction's dtype, op and lengths (bufs.CheckReduce)
// and returns the element size.
func checkReduce(op string, a Args, lens ...int) (int, error) {
	es, err := bufs.CheckReduce(a.DType, a.Op, lens...)
	if err != nil {
		return 0, fmt.Errorf("collective: %s: %w", op, err)
	}
	return es, nil
}

// granOf is the segment granularity for operations that only copy: whole
// elements when the dtype is known, else bytes (copies never need more).
func granOf(dt dtype.DType) int {
	return max(dt.Size(), 1)
}

func need(op, what string, got, want int) error {
	if err := bufs.Need(what, got, want); err != nil {
		return fmt.Errorf("collective: %s: %w", op, err)
	}
	return nil
}

// checkAlias rejects an output that overlaps an input other than by being
// exactly ins[self] (the in-place form): the reduction kernels read inputs
// after parts of the output are written, so any other overlap would
// corrupt the result.
func checkAlias(op string, out []byte, ins [][]byte, self int) error {
	for j, in := range ins {
		if bufs.Overlaps(out, in) && !(j == self && bufs.Same(out, in)) {
			return fmt.Errorf("collective: %s: Out[0] partially overlaps In[%d]", op, j)
		}
	}
	return nil
}
