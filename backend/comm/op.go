// Package comm is the communicator: one rank's handle on a group. It
// validates and queues ops, runs collectives one at a time in issue order
// (the order every rank agrees on), runs point-to-point ops as they come,
// checks that all ranks called the same op, enforces timeouts, and turns
// faults into errors that name the op and the rank at fault.
package comm

import (
	"strings"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
)

// Op is one operation as submitted. Buffers alias caller memory (tensor
// storage), which the caller keeps alive until the completion is delivered.
// Buffer conventions per kind are those of capi/zipccl_abi.h.
type Op struct {
	Ticket   uint64
	Kind     opkind.Kind
	DType    dtype.DType
	ReduceOp reduce.Op
	Root     int // rooted ops: the root; Send: destination; Recv: source or -1
	Tag      int64
	Timeout  int64 // milliseconds; <= 0 means the communicator's
	PreMul   float64
	In       [][]byte
	Out      [][]byte
	Dev      *DeviceOp // non-nil: CUDA device memory, the GPU path (device.go)
	// Staged: host copies the shim made of CUDA tensors (the host-staged
	// path). Such ops, like the coded path's, code with zip3 only.
	Staged bool

	policy lossy.Policy // the group's lossy policy when the op was submitted
	lossy  lossy.Coding // what it codes the op with (Mode quant.None: exact)
}

// numel of a buffer, in elements of the op's dtype.
func (op *Op) numel(b []byte) int64 {
	if s := op.DType.Size(); s > 0 {
		return int64(len(b) / s)
	}
	return 0
}

// validate checks an op against the group before anything is sent.
func (op *Op) validate(rank, size int) error {
	if op.Kind != opkind.Barrier && !op.DType.Valid() {
		return invalidf("%s: unsupported dtype code %d", op.Kind, uint8(op.DType))
	}
	if op.Kind.IsReduction() {
		if err := reduce.Check(op.DType, op.ReduceOp); err != nil {
			return invalidf("%s: %s", op.Kind, strings.TrimPrefix(err.Error(), "zipccl: "))
		}
	}
	for _, b := range op.In {
		if es := op.DType.Size(); es > 0 && len(b)%es != 0 {
			return invalidf("%s: buffer of %d bytes is not a whole number of %s elements", op.Kind, len(b), op.DType)
		}
	}
	need := func(what string, got, want int) error {
		if got != want {
			return invalidf("%s: expected %d %s buffers, got %d", op.Kind, want, what, got)
		}
		return nil
	}
	sameLen := func(what string, bufs [][]byte, n int) error {
		for i, b := range bufs {
			if len(b) != n {
				return invalidf("%s: %s buffer %d has %d elements, expected %d", op.Kind, what, i, op.numel(b), int64(n)/int64(max(op.DType.Size(), 1)))
			}
		}
		return nil
	}
	rootOK := func() error {
		if op.Root < 0 || op.Root >= size {
			return invalidf("%s: root rank %d is out of range for a group of %d", op.Kind, op.Root, size)
		}
		return nil
	}
	switch op.Kind {
	case opkind.AllReduce:
		if err := need("input", len(op.In), 1); err != nil {
			return err
		}
		return need("output", len(op.Out), 1)
	case opkind.Broadcast:
		if err := rootOK(); err != nil {
			return err
		}
		if err := need("input", len(op.In), 1); err != nil {
			return err
		}
		return need("output", len(op.Out), 1)
	case opkind.Reduce:
		if err := rootOK(); err != nil {
			return err
		}
		if err := need("input", len(op.In), 1); err != nil {
			return err
		}
		if err := need("output", len(op.Out), 1); err != nil {
			return err
		}
		return sameLen("output", op.Out, len(op.In[0]))
	case opkind.AllGather:
		if err := need("input", len(op.In), 1); err != nil {
			return err
		}
		if err := need("output", len(op.Out), size); err != nil {
			return err
		}
		if len(op.Out[rank]) != len(op.In[0]) {
			return invalidf("all_gather: this rank's output slot has %d elements but its input has %d", op.numel(op.Out[rank]), op.numel(op.In[0]))
		}
	case opkind.ReduceScatter:
		if err := need("input", len(op.In), size); err != nil {
			return err
		}
		if err := need("output", len(op.Out), 1); err != nil {
			return err
		}
		return sameLen("input", op.In, len(op.Out[0]))
	case opkind.AllToAll:
		if err := need("input", len(op.In), size); err != nil {
			return err
		}
		if err := need("output", len(op.Out), size); err != nil {
			return err
		}
		if len(op.In[rank]) != len(op.Out[rank]) {
			return invalidf("all_to_all: this rank sends %d elements to itself but expects %d", op.numel(op.In[rank]), op.numel(op.Out[rank]))
		}
	case opkind.Gather:
		if err := rootOK(); err != nil {
			return err
		}
		if err := need("input", len(op.In), 1); err != nil {
			return err
		}
		if rank == op.Root {
			if err := need("output", len(op.Out), size); err != nil {
				return err
			}
			return sameLen("output", op.Out, len(op.In[0]))
		}
	case opkind.Scatter:
		if err := rootOK(); err != nil {
			return err
		}
		if err := need("output", len(op.Out), 1); err != nil {
			return err
		}
		if rank == op.Root {
			if err := need("input", len(op.In), size); err != nil {
				return err
			}
			return sameLen("input", op.In, len(op.Out[0]))
		}
	case opkind.Send:
		if op.Root < 0 || op.Root >= size || op.Root == rank {
			return invalidf("send: invalid destination rank %d (group of %d, this is rank %d)", op.Root, size, rank)
		}
		return need("input", len(op.In), 1)
	case opkind.Recv:
		if op.Root < -1 || op.Root >= size || op.Root == rank {
			return invalidf("recv: invalid source rank %d (group of %d, this is rank %d)", op.Root, size, rank)
		}
		return need("output", len(op.Out), 1)
	case opkind.Barrier:
	default:
		return invalidf("unknown op kind %d", uint8(op.Kind))
	}
	return nil
}
