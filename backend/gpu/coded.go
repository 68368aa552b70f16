package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/switcher"
)

// The coded GPU path: the CUDA kernels (libzipccl_cuda.so) encode the
// payload into zip3 frames on the op's stream, NCCL moves the frames
// (ncclSend/ncclRecv, ncclAllGather, ncclBroadcast) and the kernels decode
// them, reductions with the fused decode+reduce kernel in rank order
// (float32 accumulation, one rounding), which is the fold of the CPU path's
// two-shot all-reduce, so every rank gets identical bits. Frame lengths are
// known only on the device, so the path synchronizes the stream where it
// needs them on the host (three times for an all-reduce): it runs on the
// submitting thread and returns when the op is done. A timer aborts the
// NCCL communicators at the op's deadline so those waits end.

// forceCodedNVLink lets tests code over NVLink, which the switcher never
// does on its own (ZIPCCL_GPU_COMPRESS_NVLINK=1; it must be the same on
// every rank).
var forceCodedNVLink = os.Getenv("ZIPCCL_GPU_COMPRESS_NVLINK") == "1"

func sumBytes(bufs []Buf) int {
	n := 0
	for _, b := range bufs {
		n += b.Bytes
	}
	return n
}

// payload is op's size as the switcher counts it.
func payload(op *Op) int {
	switch op.Kind {
	case opkind.AllGather:
		return sumBytes(op.Out)
	case opkind.ReduceScatter, opkind.AllToAll:
		return sumBytes(op.In)
	}
	return op.In[0].Bytes
}

// packed reports whether bufs lie back to back (any sizes).
func packed(bufs []Buf) bool {
	at := bufs[0].Ptr
	for _, b := range bufs {
		if b.Bytes > 0 && b.Ptr != at {
			return false
		}
		at += uintptr(b.Bytes)
	}
	return true
}

func overlaps(a Buf, lo uintptr, n int) bool {
	return a.Bytes > 0 && n > 0 && a.Ptr < lo+uintptr(n) && lo < a.Ptr+uintptr(a.Bytes)
}

// codedLayout says whether op's buffers suit the kernels (one contiguous
// tensor cut into chunks on each side).
func (g *Group) codedLayout(op *Op) bool {
	switch op.Kind {
	case opkind.AllReduce, opkind.Broadcast:
		return op.In[0].Ptr == op.Out[0].Ptr && op.In[0].Bytes == op.Out[0].Bytes
	case opkind.ReduceScatter:
		return contiguous(op.In, op.Out[0].Bytes) && !overlaps(op.Out[0], op.In[0].Ptr, sumBytes(op.In))
	case opkind.AllGather:
		return contiguous(op.Out, op.In[0].Bytes)
	case opkind.AllToAll:
		return packed(op.In) && packed(op.Out) && !overlaps(op.Out[0], op.In[0].Ptr, sumBytes(op.In))
	}
	return false
}

// a2aBytes stands for an all_to_all's payload in the switcher's input.
// Each rank knows only its own splits, which MoE routing makes uneven, and
// ranks deciding on different sizes would run different protocols over
// NCCL, or probe the links alone, and hang. The GPU path has no per-op
// agreement to learn the group's largest size from (the CPU path's check
// carries it), so every rank decides as for this size.
const a2aBytes = 64 << 20

// wantCoded is the switcher's call for op on the GPU. Everything it reads
// is agreed (the op, the agreement, the profile measured by all ranks
// together), so every rank decides the same.
func (g *Group) wantCoded(op *Op, a agreement, c ncclComm, deadline time.Time) (switcher.Decision, bool) {
	if g.cfg.Size < 2 || !a.kernels || !codedOnGPU(op.Kind, op.DType, op.ReduceOp) || !g.codedLayout(op) {
		return switcher.Decision{}, false
	}
	noCompress := a.nvlink && !forceCodedNVLink
	if noCompress {
		// Never over NVLink, whatever the mode.
		return switcher.Decision{Why: "NVLink: never coded"}, false
	}
	sop, _ := switcher.OpOf(op.Kind) // codedOnGPU admits only kinds it knows
	in := switcher.Input{Op: sop, DType: op.DType, Bytes: payload(op), Ranks: g.cfg.Size, Mode: g.cfg.Mode}
	if op.Kind == opkind.AllToAll {
		in.Bytes = a2aBytes
	}
	if g.cfg.Mode == switcher.Auto && !g.profile.Measured && !g.probed && in.Bytes >= g.cfg.Thresholds.CompressMin {
		g.probed = true
		if err := g.probe(op, c, deadline); err != nil {
			g.log.Warnf("measuring the GPU links failed (%v); CUDA tensors stay uncompressed", err)
		}
	}
	in.Profile = g.profile
	in.Profile.NoCompress = noCompress
	d := switcher.Decide(in, g.cfg.Thresholds)
	if d.Coded {
		d.Kind = codec.Zip3 // the only kind the kernels code
	}
	return d, d.Coded
}

// Scratch buffers of the coded path (device memory, kept per group and
// grown on demand; only coded ops use them and they finish before
// returning).
const (
	sSend = iota
	sRecv
	sLens
	sLensAll
	sRed
	sMine
	sGather
	sWsEnc
	sWsRed
	sWsEnc2
	sWsDec
	sProbe
	sProbeFold
	sStandIn
	sHostPack // lossy reductions on hosts: the exact stage's messages and sums
	sHostRecv
	sHostSums
)

func (g *Group) buf(k *Kernels, slot int, n int64) (uintptr, error) {
	n = max(n, 256)
	if b := g.scratch[slot]; b.n >= n {
		return b.p, nil
	} else if b.p != 0 {
		k.Free(g.device, b.p)
		delete(g.scratch, slot)
	}
	p, err := k.Malloc(g.device, n)
	if err != nil {
		return 0, err
	}
	g.scratch[slot] = devBuf{p: p, n: n}
	return p, nil
}

func (g *Group) freeScratch() {
	if len(g.scratch) == 0 {
		return
	}
	k, err := g.env.Kernels()
	if err != nil {
		return
	}
	for slot, b := range g.scratch {
		k.Free(g.device, b.p)
		delete(g.scratch, slot)
	}
}

func splitEven(n int64, parts int) []int64 {
	out := make([]int64, parts)
	for r := range out {
		out[r] = n / int64(parts)
		if int64(r) < n%int64(parts) {
			out[r]++
		}
	}
	return out
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

func dataError(err error) bool {
	var ke *KernelError
	return errors.As(err, &ke) && ke.Status >= zcclCorrupt && ke.Status <= 10
}

// runCoded runs op on the coded path, guarded by its deadline and the
// group's context.
func (g *Group) runCoded(op *Op, c ncclComm, deadline time.Time) error {
	return g.runOnDevice(op, c, deadline, "coded", func(x *coder) error {
		switch op.Kind {
		case opkind.AllReduce:
			return x.allReduce()
		case opkind.ReduceScatter:
			return x.reduceScatter()
		case opkind.AllGather:
			return x.allGather()
		case opkind.AllToAll:
			return x.allToAll()
		case opkind.Broadcast:
			return x.broadcast()
		}
		return fmt.Errorf("no coded algorithm for %v", op.Kind)
	})
}

// runOnDevice runs one op of the kernels and NCCL (run), on the submitting
// thread: a timer aborts the communicators at the op's deadline, so that
// NCCL's waits end, and the group's context does as it is cancelled. what
// names the path in a timeout's message.
func (g *Group) runOnDevice(op *Op, c ncclComm, deadline time.Time, what string, run func(x *coder) error) error {
	k, err := g.env.Kernels()
	if err != nil {
		return g.fail(CodeInternal, op, "%v", err)
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(time.Until(deadline), func() { timedOut.Store(true); g.abortComms() })
	stop := context.AfterFunc(g.cfg.Ctx, g.abortComms)
	defer timer.Stop()
	defer stop()
	x := &coder{g: g, k: k, c: c, op: op, dev: op.Device, st: op.Stream, dt: op.DType, es: int64(op.DType.Size()), deadline: deadline}
	err = run(x)
	op.Wire = x.wire
	var mismatch *mismatchError
	switch {
	case err == nil:
		return nil
	case timedOut.Load():
		e := g.fail(CodeTimeout, op, "timed out after %v (%s; the NCCL communicators were aborted)", op.Timeout, what)
		g.breakDevice(errors.New(e.Error()), nil)
		return e
	case g.cfg.Ctx.Err() != nil:
		return g.breakOn(op, context.Cause(g.cfg.Ctx))
	case errors.As(err, &mismatch):
		// Every rank read the same headers and fails alike; the
		// communicators are fine.
		return g.fail(CodeInvalid, op, "%v", err)
	case dataError(err):
		// The frames arrived but do not decode: this op fails, the
		// communicators are fine.
		return g.fail(CodeComm, op, "a compressed frame failed to decode on the GPU: %v", err)
	}
	return g.breakOn(op, err)
}

// coder is one coded op in progress.
type coder struct {
	g        *Group
	k        *Kernels
	c        ncclComm
	op       *Op
	dev      int
	st       uintptr
	dt       dtype.DType
	es       int64
	deadline time.Time
	wire     int64
}

func (x *coder) settle() error { return x.c.Settle(x.deadline) }

func (x *coder) buf(slot int, n int64) (uintptr, error) { return x.g.buf(x.k, slot, n) }

// lengths reads n int64 frame lengths from device memory (after a sync).
func (x *coder) lengths(p uintptr, n int) ([]int64, error) {
	raw := make([]byte, 8*n)
	if err := x.k.CopyToHost(x.dev, raw, p); err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out, nil
}

// encodeAndShareLengths encodes src (counts chunks) into frames at
// out+offs and all-gathers every rank's len(counts) frame lengths: the
// result holds rank j's length of chunk r at [j*len(counts)+r].
func (x *coder) encodeAndShareLengths(src uintptr, counts []int64, out uintptr, offs []int64, wsSlot int) ([]int64, error) {
	n := len(counts)
	ws, err := x.buf(wsSlot, x.k.EncodeWorkspace(x.dt, counts))
	if err != nil {
		return nil, err
	}
	lens, err := x.buf(sLens, int64(8*n))
	if err != nil {
		return nil, err
	}
	all, err := x.buf(sLensAll, int64(8*n*x.g.cfg.Size))
	if err != nil {
		return nil, err
	}
	if err := x.k.EncodeFrames(x.dev, x.dt, src, counts, out, offs, lens, ws, x.g.scratch[wsSlot].n, x.st); err != nil {
		return nil, err
	}
	if err := x.c.AllGather(lens, all, 8*n, ncclUint8, x.st); err != nil {
		return nil, err
	}
	if err := x.settle(); err != nil {
		return nil, err
	}
	if err := x.k.WorkspaceStatus(x.dev, ws, x.st); err != nil {
		return nil, err
	}
	return x.lengths(all, n*x.g.cfg.Size)
}

// scatterReduce is the reduce-scatter phase: src holds counts[r] elements
// per rank r back to back; the frames of chunk `me` from every rank are
// decoded and folded in rank order (this rank's own chunk taken as it is)
// into dst.
func (x *coder) scatterReduce(src uintptr, counts []int64, dst uintptr) error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	slots, err := x.k.FrameSlots(x.dt, counts)
	if err != nil {
		return err
	}
	send, err := x.buf(sSend, slots[n])
	if err != nil {
		return err
	}
	slotMe := roundUp(x.k.MaxFrameLen(x.dt, counts[me]), 128)
	recv, err := x.buf(sRecv, slotMe*int64(n))
	if err != nil {
		return err
	}
	L, err := x.encodeAndShareLengths(src, counts, send, slots[:n], sWsEnc)
	if err != nil {
		return err
	}
	if err := x.exchange(func(j int) (uintptr, int64, uintptr, int64) {
		return send + uintptr(slots[j]), L[me*n+j], recv + uintptr(int64(j)*slotMe), L[j*n+me]
	}, false); err != nil {
		return err
	}
	srcs := make([]Source, n)
	var off int64
	for j := 0; j < n; j++ {
		if j == me {
			for r := 0; r < me; r++ {
				off += counts[r]
			}
			srcs[j] = Source{Kind: SrcPlain, Ptr: src + uintptr(off*x.es)}
		} else {
			srcs[j] = Source{Kind: SrcFrame, Ptr: recv + uintptr(int64(j)*slotMe), Len: L[j*n+me]}
		}
	}
	ws, err := x.buf(sWsRed, x.k.ReduceWorkspace(x.dt, counts[me], n))
	if err != nil {
		return err
	}
	if err := x.k.DecodeReduce(x.dev, x.dt, int(x.op.ReduceOp), srcs, counts[me], dst, ws, x.g.scratch[sWsRed].n, x.st); err != nil {
		return err
	}
	return nil
}

// exchange sends and receives one frame per peer in one NCCL group
// (self included when self is true).
func (x *coder) exchange(frame func(j int) (sendPtr uintptr, sendLen int64, recvPtr uintptr, recvLen int64), self bool) error {
	lib, err := x.g.env.NCCL()
	if err != nil {
		return err
	}
	if err := lib.GroupStart(); err != nil {
		return err
	}
	var first error
	for j := 0; j < x.g.cfg.Size; j++ {
		if j == x.g.cfg.Rank && !self {
			continue
		}
		sp, sl, rp, rl := frame(j)
		if sl > 0 && first == nil {
			first = x.c.Send(sp, int(sl), ncclUint8, j, x.st)
			if j != x.g.cfg.Rank {
				x.wire += sl
			}
		}
		if rl > 0 && first == nil {
			first = x.c.Recv(rp, int(rl), ncclUint8, j, x.st)
		}
	}
	if err := lib.GroupEnd(); err != nil && first == nil {
		first = err
	}
	if first != nil {
		return first
	}
	return x.settle()
}

// gatherFrames encodes src (count elements) as one frame per rank and
// all-gathers the frames (padded to the longest, a 128-byte multiple);
// it returns the gathered buffer, the slot size and the lengths.
func (x *coder) gatherFrames(src uintptr, count int64, maxCount int64) (uintptr, int64, []int64, error) {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	capMine := roundUp(x.k.MaxFrameLen(x.dt, maxCount), 128)
	mine, err := x.buf(sMine, capMine)
	if err != nil {
		return 0, 0, nil, err
	}
	all, err := x.encodeAndShareLengths(src, []int64{count}, mine, []int64{0}, sWsEnc2)
	if err != nil {
		return 0, 0, nil, err
	}
	var longest int64
	for _, l := range all {
		longest = max(longest, l)
	}
	slot := roundUp(longest, 128)
	gathered, err := x.buf(sGather, slot*int64(n))
	if err != nil {
		return 0, 0, nil, err
	}
	if err := x.c.AllGather(mine, gathered, int(slot), ncclUint8, x.st); err != nil {
		return 0, 0, nil, err
	}
	x.wire += all[me] * int64(n-1)
	return gathered, slot, all, x.settle()
}

// decodeGathered decodes the n gathered frames into dst (counts chunks).
func (x *coder) decodeGathered(gathered uintptr, slot int64, lens, counts []int64, dst uintptr) error {
	n := len(counts)
	offs := make([]int64, n)
	for r := range offs {
		offs[r] = int64(r) * slot
	}
	ws, err := x.buf(sWsDec, x.k.DecodeWorkspace(x.dt, counts))
	if err != nil {
		return err
	}
	if err := x.k.DecodeFrames(x.dev, x.dt, gathered, offs, lens, counts, dst, ws, x.g.scratch[sWsDec].n, x.st); err != nil {
		return err
	}
	return x.k.WorkspaceStatus(x.dev, ws, x.st)
}

func maxOf(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// allReduce: reduce-scatter of frames, then an all-gather of the reduced
// chunks' frames; every rank decodes every chunk, its own included.
func (x *coder) allReduce() error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	buf := x.op.In[0].Ptr
	counts := splitEven(int64(x.op.In[0].Bytes)/x.es, n)
	red, err := x.buf(sRed, counts[me]*x.es)
	if err != nil {
		return err
	}
	if err := x.scatterReduce(buf, counts, red); err != nil {
		return err
	}
	gathered, slot, lens, err := x.gatherFrames(red, counts[me], maxOf(counts))
	if err != nil {
		return err
	}
	// The fold's status (the encode after it synchronized the stream).
	if err := x.k.WorkspaceStatus(x.dev, x.g.scratch[sWsRed].p, x.st); err != nil {
		return err
	}
	return x.decodeGathered(gathered, slot, lens, counts, buf)
}

func (x *coder) reduceScatter() error {
	n := x.g.cfg.Size
	counts := make([]int64, n)
	for r := range counts {
		counts[r] = int64(x.op.Out[0].Bytes) / x.es
	}
	if err := x.scatterReduce(x.op.In[0].Ptr, counts, x.op.Out[0].Ptr); err != nil {
		return err
	}
	return x.k.WorkspaceStatus(x.dev, x.g.scratch[sWsRed].p, x.st)
}

func (x *coder) allGather() error {
	n := x.g.cfg.Size
	count := int64(x.op.In[0].Bytes) / x.es
	counts := make([]int64, n)
	for r := range counts {
		counts[r] = count
	}
	gathered, slot, lens, err := x.gatherFrames(x.op.In[0].Ptr, count, count)
	if err != nil {
		return err
	}
	return x.decodeGathered(gathered, slot, lens, counts, x.op.Out[0].Ptr)
}

func (x *coder) allToAll() error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	cin, cout := make([]int64, n), make([]int64, n)
	for r := 0; r < n; r++ {
		cin[r] = int64(x.op.In[r].Bytes) / x.es
		cout[r] = int64(x.op.Out[r].Bytes) / x.es
	}
	slots, err := x.k.FrameSlots(x.dt, cin)
	if err != nil {
		return err
	}
	send, err := x.buf(sSend, slots[n])
	if err != nil {
		return err
	}
	roff := make([]int64, n+1)
	for r := 0; r < n; r++ {
		roff[r+1] = roff[r] + roundUp(x.k.MaxFrameLen(x.dt, cout[r]), 128)
	}
	recv, err := x.buf(sRecv, roff[n])
	if err != nil {
		return err
	}
	L, err := x.encodeAndShareLengths(x.op.In[0].Ptr, cin, send, slots[:n], sWsEnc)
	if err != nil {
		return err
	}
	caps := make([]int64, n)
	for j := 0; j < n; j++ {
		caps[j] = L[j*n+me]
	}
	if err := x.exchange(func(j int) (uintptr, int64, uintptr, int64) {
		return send + uintptr(slots[j]), L[me*n+j], recv + uintptr(roff[j]), caps[j]
	}, true); err != nil {
		return err
	}
	ws, err := x.buf(sWsDec, x.k.DecodeWorkspace(x.dt, cout))
	if err != nil {
		return err
	}
	if err := x.k.DecodeFrames(x.dev, x.dt, recv, roff[:n], caps, cout, x.op.Out[0].Ptr, ws, x.g.scratch[sWsDec].n, x.st); err != nil {
		return err
	}
	return x.k.WorkspaceStatus(x.dev, ws, x.st)
}

func (x *coder) broadcast() error {
	n, me, root := x.g.cfg.Size, x.g.cfg.Rank, x.op.Root
	buf := x.op.In[0].Ptr
	count := int64(x.op.In[0].Bytes) / x.es
	capMine := roundUp(x.k.MaxFrameLen(x.dt, count), 128)
	mine, err := x.buf(sMine, capMine)
	if err != nil {
		return err
	}
	lens, err := x.buf(sLens, 8)
	if err != nil {
		return err
	}
	if me == root {
		ws, err := x.buf(sWsEnc, x.k.EncodeWorkspace(x.dt, []int64{count}))
		if err != nil {
			return err
		}
		if err := x.k.EncodeFrames(x.dev, x.dt, buf, []int64{count}, mine, []int64{0}, lens, ws, x.g.scratch[sWsEnc].n, x.st); err != nil {
			return err
		}
	}
	if err := x.c.Broadcast(lens, lens, 8, ncclUint8, root, x.st); err != nil {
		return err
	}
	if err := x.settle(); err != nil {
		return err
	}
	if me == root {
		if err := x.k.WorkspaceStatus(x.dev, x.g.scratch[sWsEnc].p, x.st); err != nil {
			return err
		}
	} else if err := x.k.Sync(x.dev, x.st); err != nil {
		return err
	}
	l, err := x.lengths(lens, 1)
	if err != nil {
		return err
	}
	if err := x.c.Broadcast(mine, mine, int(l[0]), ncclUint8, root, x.st); err != nil {
		return err
	}
	if me == root {
		x.wire += l[0] * int64(n-1) // as a chain would; NCCL's algorithm decides
	}
	if err := x.settle(); err != nil {
		return err
	}
	if me == root {
		return x.k.Sync(x.dev, x.st)
	}
	return x.decodeGathered(mine, 0, l, []int64{count}, buf)
}

// probe measures the group's GPU links and the kernels' speed once, on
// this op's data, and folds the results over the group (the worst link,
// the slowest coder) with an NCCL all-reduce, so every rank holds the same
// profile. A rank that failed to measure makes every rank keep Auto off.
func (g *Group) probe(op *Op, c ncclComm, deadline time.Time) error {
	k, err := g.env.Kernels()
	if err != nil {
		return err
	}
	lib, err := g.env.NCCL()
	if err != nil {
		return err
	}
	dev, st, n, me := op.Device, op.Stream, g.cfg.Size, g.cfg.Rank
	right, left := (me+1)%n, (me-1+n)%n
	const big = 4 << 20
	scratch, err := g.buf(k, sProbe, 2*big)
	if err != nil {
		return err
	}
	exchange := func(bytes int) (time.Duration, error) {
		start := time.Now()
		if err := lib.GroupStart(); err != nil {
			return 0, err
		}
		e1 := c.Send(scratch, bytes, ncclUint8, right, st)
		e2 := c.Recv(scratch+big, bytes, ncclUint8, left, st)
		if err := errors.Join(e1, e2, lib.GroupEnd(), c.Settle(deadline), k.Sync(dev, st)); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	failed := 0.0
	alpha, beta := math.Inf(1), math.Inf(1)
	for i := 0; i < 3; i++ {
		d, err := exchange(1)
		if err != nil {
			return err // NCCL trouble: breakOn handles it upstream
		}
		alpha = min(alpha, d.Seconds())
	}
	for i := 0; i < 3; i++ {
		d, err := exchange(big)
		if err != nil {
			return err
		}
		beta = min(beta, (d.Seconds()-alpha)/big)
	}
	beta = max(beta, 1e-13)
	enc, dec := g.kernelSpeed(k, op)
	if enc <= 0 || dec <= 0 {
		failed = 1
	}
	vals := []float64{failed, alpha, beta, -enc, -dec}
	raw := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
	}
	fold, err := g.buf(k, sProbeFold, int64(len(raw)))
	if err != nil {
		return err
	}
	if err := k.CopyFromHost(dev, fold, raw); err != nil {
		return err
	}
	if err := errors.Join(c.AllReduce(fold, fold, len(vals), ncclFloat64, ncclMax, st), c.Settle(deadline), k.Sync(dev, st)); err != nil {
		return err
	}
	if err := k.CopyToHost(dev, raw, fold); err != nil {
		return err
	}
	for i := range vals {
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	if vals[0] > 0 {
		return errors.New("a rank could not time the CUDA kernels")
	}
	p := switcher.Profile{Measured: true, Alpha: vals[1], Beta: vals[2]}
	p.Enc[codec.Zip3], p.Dec[codec.Zip3] = -vals[3], -vals[4]
	g.profile = p
	g.log.Infof("GPU link profile: latency %.0fus, %.2f GB/s on the slowest link; zip3 kernels %.1f/%.1f GB/s (encode/decode, slowest rank)",
		p.Alpha*1e6, 1e-9/p.Beta, p.Enc[codec.Zip3]/1e9, p.Dec[codec.Zip3]/1e9)
	return nil
}

// standInBytes: a rank with less input than this times the kernels on
// codec.StandIn data of this size instead. Launch costs would dominate a
// small buffer, and an empty one (an all_to_all's splits) times nothing:
// either would fold the group's kernel speed to almost nothing, and keep
// the group uncoded for good. (Tests on the CPU emulation of the kernels
// lower it.)
var standInBytes int64 = 16 << 20

// kernelSpeed times a zip3 encode and decode of (up to 64 MiB of) op's
// input on its stream, in raw bytes per second; 0 when it cannot.
func (g *Group) kernelSpeed(k *Kernels, op *Op) (enc, dec float64) {
	dev, st := op.Device, op.Stream
	es := int64(op.DType.Size())
	src, bytes := op.In[0].Ptr, int64(op.In[0].Bytes)
	if op.Kind == opkind.AllToAll {
		bytes = int64(sumBytes(op.In)) // packed (codedLayout): the whole input
	}
	if bytes < standInBytes {
		p, err := g.buf(k, sStandIn, standInBytes)
		if err != nil || k.CopyFromHost(dev, p, codec.StandIn(op.DType, int(standInBytes))) != nil {
			return 0, 0
		}
		defer func() { // the timing has synchronized the stream
			k.Free(g.device, p)
			delete(g.scratch, sStandIn)
		}()
		src, bytes = p, standInBytes
	}
	count := min(bytes, 64<<20) / es
	counts := []int64{count}
	frame, err1 := g.buf(k, sMine, roundUp(k.MaxFrameLen(op.DType, count), 128))
	out, err2 := g.buf(k, sGather, count*es)
	lens, err3 := g.buf(k, sLens, 8)
	wsE, err4 := g.buf(k, sWsEnc, k.EncodeWorkspace(op.DType, counts))
	wsD, err5 := g.buf(k, sWsDec, k.DecodeWorkspace(op.DType, counts))
	if errors.Join(err1, err2, err3, err4, err5) != nil {
		return 0, 0
	}
	var tEnc, tDec time.Duration
	for i := 0; i < 2; i++ { // the first round warms up
		start := time.Now()
		if k.EncodeFrames(dev, op.DType, src, counts, frame, []int64{0}, lens, wsE, g.scratch[sWsEnc].n, st) != nil || k.WorkspaceStatus(dev, wsE, st) != nil {
			return 0, 0
		}
		tEnc = time.Since(start)
		l, err := (&coder{g: g, k: k, dev: dev}).lengths(lens, 1)
		if err != nil {
			return 0, 0
		}
		start = time.Now()
		if k.DecodeFrames(dev, op.DType, frame, []int64{0}, l, counts, out, wsD, g.scratch[sWsDec].n, st) != nil || k.WorkspaceStatus(dev, wsD, st) != nil {
			return 0, 0
		}
		tDec = time.Since(start)
	}
	b := float64(count * es)
	return b / max(tEnc.Seconds(), 1e-9), b / max(tDec.Seconds(), 1e-9)
}
