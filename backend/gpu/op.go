package gpu

import (
	"context"
	"time"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/zlog"
)

// Buf is a region of device memory.
type Buf struct {
	Ptr   uintptr
	Bytes int
}

// Op is one op on CUDA tensors. Buffer conventions are those of
// capi/zipccl_abi.h.
type Op struct {
	Kind     opkind.Kind
	DType    dtype.DType
	ReduceOp reduce.Op
	Root     int // rooted ops: the root; Send: destination; Recv: source
	Tag      int64
	PreMul   float64
	In, Out  []Buf
	Device   int     // CUDA device index
	Stream   uintptr // the cudaStream_t to enqueue on
	Done     uintptr // the shim's end-event handle (QueryFunc)
	Defer    bool    // coalescing: enqueue at Flush, in one NCCL group
	Timeout  time.Duration
	Label    string // "all_reduce(float32, 1024 elements, SUM)", for messages
	// Lossy: the coding the group's lossy policy gives the op (Mode
	// quant.None when it runs exact).
	Lossy lossy.Coding

	// OnDone is called exactly once for an op Submit accepted: with nil
	// when its end event completed, or with the failure.
	OnDone func(err error)

	// Set by Submit, for statistics.
	Decision switcher.Decision
	Wire     int64 // payload bytes this rank sent (coded ops)
}

// Config describes one rank's view of a group.
type Config struct {
	Rank, Size int
	Name       string
	Store      rendezvous.Store
	Log        *zlog.Logger
	Mode       switcher.Mode
	Thresholds switcher.Defaults
	// Ctx is cancelled when the group breaks or is torn down: in-flight
	// device ops then fail and the NCCL communicators are aborted.
	Ctx context.Context
	// OnBroken is told when a device failure (timeout, NCCL error) made
	// the group unusable.
	OnBroken func(reason error)
	Env      *Env // nil: the process's
	// Forced: the group's own choice of path (its option gpu_path: nccl,
	// coded, staged), over ZIPCCL_GPU_PATH; "" leaves that.
	Forced string
	// Flat: the group's hierarchy=flat. The lossy reductions then take
	// their one-hop form on hosts of several ranks too, as the host path's
	// do.
	Flat bool
}
