package comm

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/gpu"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// The coded path (gpu.PathCoded): an op on CUDA tensors that runs through
// this communicator like a host op (the executor, the agreement check, the
// switcher, the transport), its buffers device memory. Where the switcher
// codes it and the GPU has the kernels for it, zcoll runs with a
// gpu.DevCoder: segments are coded on the GPU and only frames cross to host
// memory. Everything else (uncoded decisions, integer and MIN/MAX
// reductions, AVG and PREMUL_SUM, gather, scatter, reduce) is staged by the
// engine: copied into page-locked host memory, run on the CPU path, copied
// back. The messages are the same either way, and the same as a host op's,
// so ranks that stage their CUDA tensors (or have none) and ranks that code
// them on the GPU run one op together.

// devState is a device op's view of its GPU while it runs.
type devState struct {
	d      *gpu.Device
	sample []byte // host copy of up to probeSample bytes of its largest input
}

func (c *Comm) gpuEnv() *gpu.Env { return c.cfg.GPU }

// readyDevice waits until the op's inputs are ready on the device (the
// shim's start event), then sets t.dev, with a host sample of the data
// for the switcher's estimates when sample is true.
func (c *Comm) readyDevice(ctx context.Context, t *task, sample bool) error {
	op := t.op
	d, err := gpu.DeviceFor(c.gpuEnv(), op.Dev.Index)
	if err != nil {
		return fmt.Errorf("the coded GPU path cannot use cuda:%d: %w", op.Dev.Index, err)
	}
	if err := gpu.WaitEventOf(c.gpuEnv(), ctx, op.Dev.Done); err != nil {
		return fmt.Errorf("waiting for the op's inputs on cuda:%d: %w", op.Dev.Index, err)
	}
	t.dev = &devState{d: d}
	if !sample {
		return nil
	}
	var best []byte
	for _, b := range op.In {
		if len(b) > len(best) {
			best = b
		}
	}
	if es := op.DType.Size(); es > 0 && len(best) > 0 {
		n := min(len(best), probeSample) / es * es
		t.dev.sample = make([]byte, n)
		if err := d.CopyIn(t.dev.sample, best[:n]); err != nil {
			return fmt.Errorf("sampling the op's data on cuda:%d: %w", op.Dev.Index, err)
		}
	}
	return nil
}

// sampleOf is the data the switcher's estimates read: the largest input
// (a device op's host sample).
func sampleOf(t *task) []byte {
	if t.dev != nil {
		return t.dev.sample
	}
	var best []byte
	for _, b := range t.op.In {
		if len(b) > len(best) {
			best = b
		}
	}
	return best
}

// fromDevice says whether op's data lives on a GPU (coded path) or was
// staged from one by the shim. Such ops are coded with zip3 only, the one
// kind the GPU codes, so that a rank coding on its GPU and a rank coding
// the same op on its CPU send each other the same kind of message.
func fromDevice(op *Op) bool { return op.Dev != nil || op.Staged }

// gpuCodes says whether the GPU codes op as decided: the zcoll family,
// coded, with a kind, dtype, reduction and group size its kernels handle.
func (c *Comm) gpuCodes(op *Op, d switcher.Decision) bool {
	if !d.Zcoll || !d.Coded || d.Kind != codec.Zip3 || !switcher.Compressible(op.DType) {
		return false
	}
	switch op.Kind {
	case opkind.AllReduce, opkind.ReduceScatter:
		return (op.ReduceOp == reduce.Sum || op.ReduceOp == reduce.Product) && c.cfg.Size <= 48
	case opkind.AllGather, opkind.AllToAll, opkind.Broadcast:
		return true
	}
	return false
}

// runDevice runs a device op's data movement: zcoll with the GPU coding,
// or staged through host memory.
func (c *Comm) runDevice(ctx context.Context, conn *opConn, op *Op, t *task) error {
	if c.gpuCodes(op, t.decision) {
		t.gpuCoded = true
		a := collective.Args{DType: op.DType, Op: op.ReduceOp, Root: op.Root, In: op.In, Out: op.Out, Pool: c.pool, Local: c.z.local}
		return c.runZcoll(ctx, conn, op, a, t, t.dev.d.Coder())
	}
	return c.staged(t, func(host *Op) error { return c.runAlgorithm(ctx, conn, host, t) })
}

// staged runs f on a host copy of device op t.op and copies the outputs
// back when it succeeded.
func (c *Comm) staged(t *task, f func(host *Op) error) error {
	s, err := t.dev.d.Stage(t.op.In, t.op.Out)
	if err != nil {
		return fmt.Errorf("staging the op's CUDA buffers in host memory: %w", err)
	}
	defer s.Release()
	host := *t.op
	host.In, host.Out, host.Dev = s.In, s.Out, nil
	if err := f(&host); err != nil {
		return err
	}
	if err := s.CopyBack(); err != nil {
		return fmt.Errorf("copying the results back to cuda:%d: %w", t.op.Dev.Index, err)
	}
	return nil
}

// deviceCodecSpeed times the GPU coder on (up to probeSample bytes of) the
// op's largest input, copies included: what one segment costs on the coded
// path. 0 when it cannot.
func deviceCodecSpeed(t *task) (enc, dec float64) {
	op := t.op
	var best []byte
	for _, b := range op.In {
		if len(b) > len(best) {
			best = b
		}
	}
	es := op.DType.Size()
	n := min(len(best), probeSample) / es * es
	co := t.dev.d.Coder()
	var seg []byte
	if n >= probeMinSample {
		seg = best[:n]
	} else {
		// too little data to time: stand-in weights, uploaded once
		host := codec.StandIn(op.DType, probeSample)
		sc, err := co.Scratch(len(host))
		if err != nil {
			return 0, 0
		}
		defer co.PutScratch(sc)
		if err := t.dev.d.CopyOut(sc, host); err != nil {
			return 0, 0
		}
		seg = sc
	}
	out, err := co.Scratch(len(seg))
	if err != nil {
		return 0, 0
	}
	defer co.PutScratch(out)
	encT, decT := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for i := 0; i <= codecSpeedRuns; i++ {
		start := time.Now()
		f, err := co.EncodeFrame(seg, op.DType, codec.Zip3)
		te := time.Since(start)
		if err != nil {
			return 0, 0
		}
		start = time.Now()
		err = co.DecodeFrame(out, f, op.DType)
		td := time.Since(start)
		co.PutMsg(f)
		if err != nil {
			return 0, 0
		}
		if i > 0 { // run 0 warms the pools and the context
			encT, decT = min(encT, te), min(decT, td)
		}
	}
	return float64(len(seg)) / max(encT.Seconds(), 1e-9), float64(len(seg)) / max(decT.Seconds(), 1e-9)
}

// sendDevice sends a device op's payload: coded on the GPU when decided,
// else staged.
func (c *Comm) sendDevice(ctx context.Context, t *task, send func(buf []byte) error, sendCoded func(co zcoll.Coder) error) error {
	if err := c.readyDevice(ctx, t, false); err != nil {
		return err
	}
	if t.decision.Coded {
		t.gpuCoded = true
		return sendCoded(t.dev.d.Coder())
	}
	return c.staged(t, func(host *Op) error { return send(host.In[0]) })
}
