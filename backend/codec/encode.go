package codec

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zipccl/zipccl/backend/codec/huff"
	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Encoder holds reusable scratch state. The zero value is ready to use (or
// use NewEncoder). An Encoder is not safe for concurrent use.
type Encoder struct {
	z    zip3.Encoder
	h    huff.Encoder
	h2   *huff2Encoder // allocated on first use
	esc  []byte        // zip3 escapes of the tensor being encoded
	syms []byte        // huff symbols of one block
	hi   []byte        // fp32 high halves of one block

	// twoStage: EncodeThreads gave Encode two threads for a tensor of one
	// segment (encodeHuff2TwoStage)
	twoStage bool

	// split-mode state between EncodeStatic and EncodeDynamic
	pending bool
	src     []byte
	p       plan
	kind    Kind
}

// NewEncoder returns a ready Encoder.
func NewEncoder() *Encoder { return &Encoder{} }

// Kind returns the kind used by the last Encode or EncodeStatic call (Auto
// resolved; Raw for dtypes that are never coded).
func (e *Encoder) Kind() Kind { return e.kind }

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		return nb
	}
	return b
}

func (e *Encoder) resolve(src []byte, dt dtype.DType, k Kind) (plan, error) {
	if !dt.Valid() {
		return plan{}, fmt.Errorf("%w: %v", ErrDType, dt)
	}
	if len(src)%dt.Size() != 0 {
		return plan{}, fmt.Errorf("%w: %d bytes is not a whole number of %v elements", ErrSize, len(src), dt)
	}
	if k == Auto {
		k = ChooseKind(src, dt)
	}
	p, err := newPlan(len(src)/dt.Size(), dt, k)
	if err != nil {
		return p, err
	}
	e.kind = p.kind
	return p, nil
}

// Encode appends one self-describing frame for src (len(src) a multiple of
// dt.Size()) to dst. A frame never exceeds MaxEncodedLen(len(src), dt): when
// the coded frame would be larger than the raw frame, the raw frame is
// written instead (Kind reports which).
func (e *Encoder) Encode(dst, src []byte, dt dtype.DType, k Kind) ([]byte, error) {
	p, err := e.resolve(src, dt, k)
	if err != nil {
		return dst, err
	}
	e.pending = false
	start := len(dst)
	dst = grow(dst, encodeWant(&p))
	dst = dst[:start+HeaderLen]
	dst = e.appendStatic(dst, src, &p, true)
	dst = e.appendDynamic(dst, src, &p, true)
	return e.finish(dst, src, start, &p), nil
}

// encodeWant is the room Encode reserves for a frame of p (the result is
// shorter; the rest lets the coders append without moving it).
func encodeWant(p *plan) int {
	want := HeaderLen + p.staticLen + Align
	switch p.kind {
	case Huff:
		want += p.numel + 3<<huffBlockLog
	case Huff2, Huff2Packed:
		// every plane raw plus its mode byte, and the stream coder's room
		want += p.numel*p.size + 4*p.nblocks + 3<<huff2BlockLog
	case Zip3:
		want += p.numel / 16
	}
	return want
}

// finish pads the frame that starts at dst[start] and holds its static and
// dynamic parts (unless it is packed), falls back to the raw frame when
// that is shorter, and writes the header.
func (e *Encoder) finish(dst, src []byte, start int, p *plan) []byte {
	if !p.packed() {
		dst = padTo(dst, start+HeaderLen+p.staticLen)
	}
	if rawFrame := HeaderLen + mustPlan(p.numel, p.dt, Raw).staticLen; len(dst)-start > rawFrame && p.kind != Raw {
		*p = mustPlan(p.numel, p.dt, Raw)
		e.kind = Raw
		dst = grow(dst[:start], rawFrame)[:start+HeaderLen]
		dst = e.appendStatic(dst, src, p, false)
	}
	putHeader(dst[start:], p, len(dst)-start-HeaderLen-p.staticLen)
	return dst
}

// EncodeThreads is Encode on up to threads goroutines, the caller's among
// them (shareRuns), each coding runs of whole segments (segmentElems
// elements; the Huffman coders start a new table at each, whatever the
// thread count), into the same frame as one thread writes. Tensors below
// two segments are coded on one thread, but for bf16 and fp16 huff2 with
// threads >= 2: two goroutines then share each block's work
// (encodeHuff2TwoStage). Safe for concurrent use.
func EncodeThreads(dst, src []byte, dt dtype.DType, k Kind, threads int) ([]byte, Kind, error) {
	e := encPool.Get().(*Encoder)
	defer encPool.Put(e)
	p, err := e.resolve(src, dt, k)
	if err != nil {
		return dst, 0, err
	}
	nseg := (p.numel + segmentElems - 1) / segmentElems
	segThreads := min(threads, p.numel/segmentElems)
	if segThreads <= 1 {
		e.twoStage = threads >= 2 && runtime.GOMAXPROCS(0) >= 2 && p.huff2() && huff2Planes(p.f) == 2 && p.nblocks >= 2
		dst, err = e.Encode(dst, src, dt, p.kind)
		e.twoStage = false
		return dst, e.kind, err
	}
	threads = segThreads
	start := len(dst)
	dst = grow(dst, encodeWant(&p))[:start+HeaderLen+p.staticLen]
	st := dst[start+HeaderLen:]
	// runs of whole segments, handed out as the goroutines ask (shareRuns)
	nruns := min(nseg, encodeRunsPerThread*threads)
	bounds := make([]int, nruns+1) // block bounds of the runs
	for r := range bounds {
		bounds[r] = min(p.nblocks, (r*nseg/nruns*segmentElems)>>p.blockLog)
	}
	// run 0 appends after the static part in place; the others into
	// pooled buffers, copied after it in order
	clear(st[:p.indexLen])
	dyns := make([][]byte, nruns)
	bufs := make([]*[]byte, nruns) // the pooled buffers of runs 1..
	shareRuns(threads, nruns, func(caller bool, next func() (int, bool)) {
		et := e
		if !caller {
			et = encPool.Get().(*Encoder)
			defer encPool.Put(et)
		}
		for r, ok := next(); ok; r, ok = next() {
			if r == 0 {
				dyns[r] = dst[len(dst):]
			} else {
				bufs[r] = dynPool.Get().(*[]byte)
				dyns[r] = (*bufs[r])[:0]
			}
			dyns[r] = et.encodeBlocks(st, dyns[r], src, &p, bounds[r], bounds[r+1], true)
		}
	})
	dst = appendMaybeInPlace(dst, dyns[0])
	for r, d := range dyns[1:] {
		dst = append(dst, d...)
		*bufs[r+1] = d[:0] // keep what it grew to
		dynPool.Put(bufs[r+1])
	}
	e.kind = p.kind
	return e.finish(dst, src, start, &p), e.kind, nil
}

// segmentElems: the Huffman coders forget their table every this many
// elements (a multiple of every block size), so that runs of segments can
// be coded on separate threads into the frame one thread writes; a thread
// is started for a whole segment at least. Kept tables spare the decoder
// its lookup-table builds: resets every 2^18 elements cost fp16 decode 6
// to 8 % (benchmarks/CODEC.md), every 2^20 up to 7 % on 16 MiB, so 2^22.
// A variable for the tests.
var segmentElems = 1 << 22

// encodeRunsPerThread: EncodeThreads cuts a tensor into up to this many
// runs of segments per thread, so that a helper that starts late leaves
// little for the others to wait on.
const encodeRunsPerThread = 4

// dynPool holds the buffers that EncodeThreads's runs but the first code
// into, reused across calls rather than allocated (and zeroed) for each.
var dynPool = sync.Pool{New: func() any { return new([]byte) }}

func mustPlan(numel int, dt dtype.DType, k Kind) plan {
	p, err := newPlan(numel, dt, k)
	if err != nil {
		panic(err)
	}
	return p
}

// EncodeStatic appends the static part of src to dst: exactly
// StaticLen(len(src)/dt.Size(), dt, k) bytes, computed in one fast pass (for
// Zip3 the escapes are found in the same pass and kept for EncodeDynamic).
// Split mode does not fall back to Raw: the static length is fixed by the
// request, so a Zip3 split of incompressible data can exceed the raw size
// (see MaxDynamicLen). src must stay unchanged until EncodeDynamic returns.
// Auto is resolved here; Kind reports the choice. Huff2Packed has no split
// mode.
func (e *Encoder) EncodeStatic(dst, src []byte, dt dtype.DType, k Kind) ([]byte, error) {
	if k == Huff2Packed {
		return dst, fmt.Errorf("%w: %v frames are encoded whole (no split mode)", ErrKind, k)
	}
	p, err := e.resolve(src, dt, k)
	if err != nil {
		return dst, err
	}
	dst = grow(dst, p.staticLen+64)
	dst = e.appendStatic(dst, src, &p, false)
	e.pending, e.src, e.p = true, src, p
	return dst, nil
}

// EncodeDynamic appends the dynamic part (escapes or coded exponents, padded
// to a multiple of 128 bytes) for the src of the preceding EncodeStatic.
func (e *Encoder) EncodeDynamic(dst []byte) ([]byte, error) {
	if !e.pending {
		return dst, ErrState
	}
	e.pending = false
	start := len(dst)
	dst = e.appendDynamic(dst, e.src, &e.p, false)
	dst = padTo(dst, start)
	e.src = nil
	return dst, nil
}

// appendStatic appends p.staticLen bytes. With fused it codes the blocks'
// dynamic bytes too (escapes, records) and appends them after the static
// part, so that appendDynamic only pads; without, zip3 keeps its escapes in
// e.esc for appendDynamic.
func (e *Encoder) appendStatic(dst, src []byte, p *plan, fused bool) []byte {
	base := len(dst)
	dst = dst[:base+p.staticLen]
	clear(dst[base : base+p.indexLen])
	if !fused {
		e.esc = e.encodeBlocks(dst[base:], e.esc[:0], src, p, 0, p.nblocks, false)
		return dst
	}
	dyn := e.encodeBlocks(dst[base:], dst[len(dst):], src, p, 0, p.nblocks, true)
	return appendMaybeInPlace(dst, dyn)
}

// appendMaybeInPlace is append(dst, b...), where b may already sit right
// after dst in its array (appended to dst[len(dst):]).
func appendMaybeInPlace(dst, b []byte) []byte {
	if len(b) > 0 && cap(dst) > len(dst) && unsafe.SliceData(b) == unsafe.SliceData(dst[len(dst):cap(dst)]) {
		return dst[:len(dst)+len(b)]
	}
	return append(dst, b...)
}

// encodeBlocks codes blocks [i0, i1) of src: their index entries and static
// bytes go to st, the frame's static part (the index zeroed beforehand);
// with dynamic, their escapes or records are appended to dyn, else only
// zip3's escapes are. The Huffman coders start afresh at every segment.
func (e *Encoder) encodeBlocks(st, dyn, src []byte, p *plan, i0, i1 int, dynamic bool) []byte {
	e.z.Stream = len(src) >= encStreamMin
	if p.huff2() {
		if e.h2 == nil {
			e.h2 = new(huff2Encoder)
		}
		e.h2.setLens(p.lens())
	}
	if e.twoStage && dynamic && p.huff2() {
		return e.encodeHuff2TwoStage(st, dyn, src, p, i0, i1)
	}
	for i := i0; i < i1; i++ {
		e0, n, s0, sl := p.block(i)
		if e0%segmentElems == 0 { // output depends on this segment only
			e.resetTables(p)
		}
		blk := src[e0*p.size : (e0+n)*p.size]
		idx := p.index(st, i)
		bst := st[s0 : s0+sl]
		switch p.kind {
		case Raw:
			binary.LittleEndian.PutUint32(idx[0:], crc(blk))
			copy(bst, blk)
			clear(bst[len(blk):])
		case Huff2, Huff2Packed:
			binary.LittleEndian.PutUint32(idx[0:], crc(blk))
			if dynamic {
				dyn = e.h2.appendBlock(dyn, p.f, blk, n)
			}
		case Zip3:
			e.z.Ahead = 0
			if i+1 < p.nblocks {
				e.z.Ahead = len(blk)
			}
			w := zip3.ChooseWindow(p.f, blk, n)
			var cnt int
			var c uint32
			dyn, cnt, c = e.z.EncodeBlock(bst, dyn, blk, p.f, w)
			binary.LittleEndian.PutUint32(idx[0:], c)
			binary.LittleEndian.PutUint32(idx[4:], uint32(cnt))
			idx[8] = w.Mode
			idx[9] = w.Base
		case Huff:
			binary.LittleEndian.PutUint32(idx[0:], crc(blk))
			syms := huffSplit(p.f, bst, e.symScratch(n), blk, &e.hi)
			if dynamic {
				dyn = e.h.AppendBlock(dyn, syms)
			}
		}
	}
	return dyn
}

// encodeHuff2TwoStage is encodeBlocks for bf16 and fp16 huff2 on two
// goroutines. A block's work falls in two stages of about equal time:
// planning (the checksum, cutting the planes, the histogram, the table and
// the checks that decide the records) and writing the records (the stream
// coder). Either goroutine takes either stage, one block at a time, in
// block order: the caller prefers writing, the helper planning; up to
// h2Slots blocks are in flight (being planned, planned, being written).
// The tables are decided in block order as on one thread, so the bytes are
// encodeBlocks's. For tensors of one segment, which EncodeThreads cannot
// split.
//
// The caller never waits for the helper to start, and the helper leaves
// once neither goroutine has ended a stage for helperIdle: when another
// thread (torch's OpenMP worker, spinning after a parallel op) holds the
// second core, the two goroutines share one, and every wait of the
// helper's took time from the caller (benchmarks/CODEC.md "Two stages").
// The caller, when the helper holds the stage it needs, spins for
// callerSpin and then sleeps, giving the helper the core they may share.
func (e *Encoder) encodeHuff2TwoStage(st, dyn, src []byte, p *plan, i0, i1 int) []byte {
	var (
		n                 = int64(i1 - i0)
		planned, written  atomic.Int64 // blocks through each stage
		planning, writing atomic.Bool  // stage taken
		caller            = newBell()
	)
	pl := *p // the goroutines' own: capturing p would move every Encode's plan to the heap
	plan := func() bool {
		if planning.Load() || !planning.CompareAndSwap(false, true) {
			return false
		}
		j := planned.Load()
		ok := j < n && j-written.Load() < h2Slots
		if ok {
			i := i0 + int(j)
			e0, nb, _, _ := pl.block(i)
			if e0%segmentElems == 0 {
				e.h2.reset()
			}
			blk := src[e0*pl.size : (e0+nb)*pl.size]
			binary.LittleEndian.PutUint32(pl.index(st, i), crc(blk))
			e.h2.planBlock(&e.h2.jobs[j%h2Slots], blk, nb)
			planned.Store(j + 1)
		}
		planning.Store(false)
		return ok
	}
	write := func() bool {
		if writing.Load() || !writing.CompareAndSwap(false, true) {
			return false
		}
		j := written.Load()
		ok := j < planned.Load()
		if ok {
			dyn = e.h2.jobs[j%h2Slots].append(dyn)
			written.Store(j + 1)
		}
		writing.Store(false)
		return ok
	}
	var wg sync.WaitGroup
	var left atomic.Bool // the helper has returned
	startHelper(&wg, func() {
		defer caller.ring()
		defer left.Store(true)
		var idle time.Time // since when no stage has ended
		var seen int64
		for written.Load() < n {
			if plan() || write() {
				caller.ring()
				idle = time.Time{}
				continue
			}
			if done := planned.Load() + written.Load(); idle.IsZero() || done != seen {
				idle, seen = time.Now(), done
			} else if time.Since(idle) > helperIdle {
				return
			}
			pause()
		}
	})
	var spun time.Time
	for written.Load() < n {
		if write() || plan() {
			spun = time.Time{}
			continue
		}
		if spun.IsZero() {
			spun = time.Now()
		}
		if time.Since(spun) < callerSpin {
			pause()
			continue
		}
		// the helper holds the stage needed; it rings after each stage and
		// when it leaves
		caller.sleep(func() bool { return left.Load() || write() || plan() })
		spun = time.Time{}
	}
	wg.Wait()
	return dyn
}

// helperIdle: how long encodeHuff2TwoStage's helper waits, with no stage
// ending on either goroutine, before it leaves the rest to the caller
// (while the caller runs, one of its stages ends every 20 to 30 us; while
// the helper has the core they share, none does). callerSpin: how long the
// caller spins, waiting for the stage the helper holds, before it sleeps.
// A block's two stages take about 50 us together on one thread (the demo's
// float16 weights and bfloat16 activations). From Python, a helper
// leaving after 30, 60 or 100 us idle made no difference beyond the noise
// (benchmarks/results/two-stage-roles/idle-sweep.log). Variables for the
// tests.
var (
	helperIdle = 60 * time.Microsecond
	callerSpin = 50 * time.Microsecond
)

// bell puts a goroutine to sleep until another rings it.
type bell struct {
	asleep atomic.Bool
	ch     chan struct{}
}

func newBell() *bell { return &bell{ch: make(chan struct{}, 1)} }

// sleep blocks until ring, unless ready (called after asleep is set, so
// that a ring between ready's checks and the block is not lost) reports
// true.
func (b *bell) sleep(ready func() bool) {
	b.asleep.Store(true)
	if !ready() {
		<-b.ch
	}
	b.asleep.Store(false)
}

// ring wakes b's goroutine if it sleeps (or is about to); a ring no one
// waits for is kept for the next sleep, which then returns at once.
func (b *bell) ring() {
	if b.asleep.Load() {
		select {
		case b.ch <- struct{}{}:
		default:
		}
	}
}

// startHelper starts encodeHuff2TwoStage's helper; a variable so that the
// tests can withhold it or run it first.
var startHelper = func(wg *sync.WaitGroup, f func()) { wg.Go(f) }

// resetTables makes the Huffman coders of kind p.kind forget their tables.
func (e *Encoder) resetTables(p *plan) {
	switch p.kind {
	case Huff:
		e.h.Reset()
	case Huff2, Huff2Packed:
		e.h2.reset()
	}
}

func (e *Encoder) symScratch(n int) []byte {
	if cap(e.syms) < n {
		e.syms = make([]byte, 1<<huffBlockLog)
	}
	return e.syms[:n]
}

// appendDynamic appends the dynamic part, unpadded. fused: appendStatic
// already did.
func (e *Encoder) appendDynamic(dst, src []byte, p *plan, fused bool) []byte {
	if fused {
		return dst
	}
	switch p.kind {
	case Zip3:
		dst = append(dst, e.esc...)
		e.esc = e.esc[:0]
	case Huff, Huff2:
		for i := 0; i < p.nblocks; i++ {
			e0, n, _, _ := p.block(i)
			if e0%segmentElems == 0 {
				e.resetTables(p)
			}
			blk := src[e0*p.size : (e0+n)*p.size]
			if p.kind == Huff {
				dst = e.h.AppendBlock(dst, huffSyms(p.f, e.symScratch(n), blk))
			} else {
				dst = e.h2.appendBlock(dst, p.f, blk, n)
			}
		}
	}
	return dst
}

// padTo zero-pads dst so that len(dst)-from is a multiple of Align.
func padTo(dst []byte, from int) []byte {
	for (len(dst)-from)%Align != 0 {
		dst = append(dst, 0)
	}
	return dst
}
