package comm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zipccl/zipccl/backend/gpu"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/rendezvous"
)

// DeviceOp marks an Op whose buffers are CUDA device memory (In and Out
// then view device addresses and are never read or written here): it runs
// on the GPU path (package gpu), enqueued on Stream from the submitting
// thread, and completes when the shim's end event (Done) completes.
type DeviceOp struct {
	Index  int     // CUDA device index
	Stream uintptr // cudaStream_t
	Done   uintptr // end-event handle for the shim's query callback
	Defer  bool    // coalescing: enqueued by DeviceFlush, in one NCCL group
	// Engine: the coded path (gpu.PathCoded, devpath.go). The op runs
	// through the communicator like a host op; Done is then the event after
	// which its inputs are ready, and Stream is unused.
	Engine bool
}

// device is the communicator's GPU side, created at its first CUDA op.
type device struct {
	once sync.Once
	g    atomic.Pointer[gpu.Group]
}

func (c *Comm) deviceGroup() *gpu.Group {
	c.dev.once.Do(func() {
		z := c.shared.Load()
		c.dev.g.Store(gpu.NewGroup(gpu.Config{
			Rank: c.cfg.Rank, Size: c.cfg.Size, Name: c.cfg.Name, Store: c.cfg.Store, Log: c.log,
			Mode: z.mode, Thresholds: z.th, Ctx: c.ctx, OnBroken: c.deviceBroken, Env: c.cfg.GPU, Forced: c.gpuPath, Flat: c.flat,
		}))
	})
	return c.dev.g.Load()
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// deviceBroken is the GPU side's report that the group is unusable.
func (c *Comm) deviceBroken(reason error) {
	if !c.breakGroup(reason) {
		return
	}
	msg := fmt.Sprintf("%v (reported by rank %d)", reason, c.cfg.Rank)
	go func() {
		if c.mesh != nil {
			c.mesh.SendAbort(msg)
		}
		if c.cfg.Store != nil && c.cfg.Size > 1 {
			rendezvous.ReportAbort(c.cfg.Store, msg)
		}
	}()
}

func (c *Comm) gpuOp(op *Op) *gpu.Op {
	timeout := c.Timeout()
	if op.Timeout > 0 {
		timeout = time.Duration(op.Timeout) * time.Millisecond
	}
	g := &gpu.Op{
		Kind: op.Kind, DType: op.DType, ReduceOp: op.ReduceOp, Root: op.Root, Tag: op.Tag, PreMul: op.PreMul,
		In: deviceBufs(op.In), Out: deviceBufs(op.Out), Timeout: timeout, Label: deviceLabel(op, c.cfg.Rank),
	}
	if op.Dev != nil {
		g.Device, g.Stream, g.Done, g.Defer = op.Dev.Index, op.Dev.Stream, op.Dev.Done, op.Dev.Defer
	}
	return g
}

func deviceBufs(bufs [][]byte) []gpu.Buf {
	out := make([]gpu.Buf, len(bufs))
	for i, b := range bufs {
		if len(b) > 0 {
			out[i] = gpu.Buf{Ptr: uintptrOf(b), Bytes: len(b)}
		}
	}
	return out
}

func deviceLabel(op *Op, rank int) string {
	switch op.Kind {
	case opkind.Send:
		return fmt.Sprintf("send to rank %d (tag %d, %s)", op.Root, op.Tag, op.DType)
	case opkind.Recv:
		return fmt.Sprintf("recv from rank %d (tag %d, %s)", op.Root, op.Tag, op.DType)
	}
	return describe(op, rank).String()
}

func deviceErr(err error) error {
	var e *gpu.Error
	if errors.As(err, &e) {
		return &Error{Code: Code(e.Code), Msg: e.Msg}
	}
	return err
}

// DevicePlan says whether op (on CUDA tensors) runs through NCCL
// (gpu.PathNCCL), through the engine (gpu.PathCoded) or host-staged by the
// caller (gpu.PathStaged: among others every op the group's lossy policy
// codes), with the reason; refuse is set when CUDA tensors cannot do op at
// all. Every rank that calls the same op decides the same. The first call
// publishes this rank's GPU capabilities and waits for the ranks op
// involves.
func (c *Comm) DevicePlan(op *Op) (gpu.Plan, error) {
	if err := op.validate(c.cfg.Rank, c.cfg.Size); err != nil {
		return gpu.Plan{}, err
	}
	if err := c.usable(op); err != nil {
		return gpu.Plan{}, err
	}
	g := c.gpuOp(op)
	_, g.Lossy = c.lossyCoding(op)
	p, err := c.deviceGroup().Plan(g)
	return p, deviceErr(err)
}

func (c *Comm) usable(op *Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usableLocked(op)
}

// usableLocked says why op cannot start (the group shut down or broken);
// c.mu is held.
func (c *Comm) usableLocked(op *Op) error {
	if c.closing {
		return &Error{Code: CodeComm, Msg: fmt.Sprintf("zipccl: %s on rank %d: the communicator of group %q is shut down", op.Kind, c.cfg.Rank, c.cfg.Name)}
	}
	if c.broken != nil {
		return &Error{Code: CodeComm, Msg: fmt.Sprintf("zipccl: %s on rank %d: group %q is unusable after an earlier failure: %v", op.Kind, c.cfg.Rank, c.cfg.Name, c.broken)}
	}
	return nil
}

// submitDevice runs a validated device op on the GPU path. It returns once
// the op is enqueued on its stream (or deferred); Complete is called when
// its end event completed, or with its failure.
func (c *Comm) submitDevice(op *Op) error {
	c.mu.Lock()
	if c.closing || c.broken != nil {
		c.mu.Unlock()
		return c.usable(op)
	}
	c.active.Add(1)
	c.mu.Unlock()
	t := &task{op: op, start: time.Now()}
	g := c.gpuOp(op)
	g.Lossy = op.lossy
	source := -1
	if op.Kind.IsP2P() {
		source = op.Root
	}
	g.OnDone = func(err error) {
		t.decision = g.Decision
		if g.Decision.Coded || g.Lossy.Mode != quant.None {
			t.wire.Store(g.Wire)
		} else if err == nil {
			t.wire.Store(byteLen(op.In))
		}
		c.complete(t, source, deviceErr(err))
	}
	if err := c.deviceGroup().Submit(g); err != nil {
		c.active.Done()
		return deviceErr(err)
	}
	return nil
}

// DeviceFlush enqueues the device ops deferred since the last flush (a
// coalescing block) as one NCCL group.
func (c *Comm) DeviceFlush() error {
	g := c.dev.g.Load()
	if g == nil {
		return nil
	}
	return deviceErr(g.Flush())
}

// abortDevice and closeDevice tear the GPU side down with the group.
func (c *Comm) abortDevice(reason string) {
	if g := c.dev.g.Load(); g != nil {
		g.Abort(reason)
	}
}

func (c *Comm) closeDevice() {
	if g := c.dev.g.Load(); g != nil {
		g.Close()
	}
}
