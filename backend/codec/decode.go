package codec

import (
	"encoding/binary"
	"fmt"

	"github.com/zipccl/zipccl/backend/codec/huff"
	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Decoder holds reusable scratch state. The zero value is ready to use (or
// use NewDecoder). A Decoder is not safe for concurrent use.
type Decoder struct {
	z    zip3.Decoder
	h    huff.Decoder
	h2   *huff2Decoder // allocated on first use
	syms []byte
	hi   []byte
}

// NewDecoder returns a ready Decoder.
func NewDecoder() *Decoder { return &Decoder{} }

// Decode decodes exactly one frame at the start of src into dst, whose length
// must equal the frame's RawLen, and returns the frame length. Any malformed,
// truncated or corrupted input yields an error (never a panic, never a
// silently wrong tensor); dst may then hold partial output.
func (d *Decoder) Decode(dst, src []byte) (int, error) {
	st, dyn, p, err := frameParts(dst, src)
	if err != nil {
		return 0, err
	}
	if err := d.decode(dst, st, dyn, &p); err != nil {
		return 0, err
	}
	return HeaderLen + len(st) + len(dyn), nil
}

// DecodeThreads is Decode on up to threads goroutines, each decoding a run
// of the frame's blocks (at least decodeThreadElems elements); the result
// is the same for every thread count. Safe for concurrent use.
func DecodeThreads(dst, src []byte, threads int) (int, error) {
	st, dyn, p, err := frameParts(dst, src)
	if err != nil {
		return 0, err
	}
	if threads = min(threads, p.numel/decodeThreadElems); threads <= 1 {
		d := decPool.Get().(*Decoder)
		defer decPool.Put(d)
		err = d.decode(dst, st, dyn, &p)
	} else {
		err = decodeParallel(dst, st, dyn, &p, threads)
	}
	if err != nil {
		return 0, err
	}
	return HeaderLen + len(st) + len(dyn), nil
}

// decodeThreadElems: a decoding thread takes at least this many elements
// (four huff blocks); on fewer, starting it and the uneven split cost more
// than it saves. A variable for the tests.
var decodeThreadElems = 1 << 18

// frameParts checks the header of the frame at the start of src against
// dst and returns the frame's static and dynamic parts and its plan.
func frameParts(dst, src []byte) (st, dyn []byte, p plan, err error) {
	h, p, err := parseHeader(src)
	if err != nil {
		return nil, nil, p, err
	}
	if len(dst) != h.RawLen {
		return nil, nil, p, fmt.Errorf("%w: dst is %d bytes, frame holds %d", ErrSize, len(dst), h.RawLen)
	}
	if len(src) < h.FrameLen {
		return nil, nil, p, fmt.Errorf("%w: frame is %d bytes, have %d", ErrTruncated, h.FrameLen, len(src))
	}
	return src[HeaderLen : HeaderLen+h.StaticLen], src[HeaderLen+h.StaticLen : h.FrameLen], p, nil
}

// DecodeSplit decodes a tensor from its static and dynamic parts (as made by
// EncodeStatic and EncodeDynamic, or the two sections of a frame). dt and k
// must be those used to encode (k as reported by Encoder.Kind); the element
// count is len(dst)/dt.Size(); len(static) must be StaticLen and dynamic
// must be exactly the dynamic part. Huff2Packed frames have no split form.
func (d *Decoder) DecodeSplit(dst, static, dynamic []byte, dt dtype.DType, k Kind) error {
	if k == Huff2Packed {
		return fmt.Errorf("%w: %v frames are decoded whole (no split mode)", ErrKind, k)
	}
	if !dt.Valid() {
		return fmt.Errorf("%w: %v", ErrDType, dt)
	}
	if len(dst)%dt.Size() != 0 {
		return fmt.Errorf("%w: dst is %d bytes, not a whole number of %v", ErrSize, len(dst), dt)
	}
	p, err := newPlan(len(dst)/dt.Size(), dt, k)
	if err != nil {
		return err
	}
	if len(static) != p.staticLen {
		return fmt.Errorf("%w: static part is %d bytes, want %d", ErrSize, len(static), p.staticLen)
	}
	return d.decode(dst, static, dynamic, &p)
}

func (d *Decoder) decode(dst, st, dyn []byte, p *plan) error {
	if err := p.checkFrame(st, dyn); err != nil {
		return err
	}
	d.z.Stream = len(dst) >= decStreamMin
	off, err := d.decodeBlocks(dst, st, dyn, p, 0, p.nblocks, 0)
	if err != nil {
		return err
	}
	return p.checkEnd(dyn, off)
}

// checkFrame makes the checks of a frame that come before its blocks.
func (p *plan) checkFrame(st, dyn []byte) error {
	if p.kind == Raw && len(dyn) != 0 {
		return fmt.Errorf("%w: raw frame with a dynamic part", ErrCorrupt)
	}
	if !allZero(st[p.entry*p.nblocks : p.indexLen]) {
		return fmt.Errorf("%w: index padding", ErrCorrupt)
	}
	return nil
}

// checkEnd checks that the blocks used off bytes of the dynamic part and
// the rest is padding (none in a packed frame).
func (p *plan) checkEnd(dyn []byte, off int) error {
	end := alignUp(off)
	if p.packed() {
		end = off
	}
	if end != len(dyn) || !allZero(dyn[off:]) {
		return fmt.Errorf("%w: dynamic part is %d bytes, %d used", ErrCorrupt, len(dyn), off)
	}
	return nil
}

// decodeBlocks decodes blocks [i0, i1), whose dynamic bytes start at
// dyn[off:], and returns the offset after them.
func (d *Decoder) decodeBlocks(dst, st, dyn []byte, p *plan, i0, i1, off int) (int, error) {
	for i := i0; i < i1; i++ {
		m, err := d.decodeBlock(dst, st, dyn[off:], p, i)
		if err != nil {
			return off, err
		}
		off += m
	}
	return off, nil
}

// decodeBlock decodes block i, whose dynamic bytes start at dyn[0], and
// returns how many of them it used.
func (d *Decoder) decodeBlock(dst, st, dyn []byte, p *plan, i int) (int, error) {
	e0, n, s0, sl := p.block(i)
	out := dst[e0*p.size : (e0+n)*p.size]
	idx := p.index(st, i)
	bst := st[s0 : s0+sl]
	var got uint32
	used := 0
	switch p.kind {
	case Raw:
		if !allZero(idx[4:]) || !allZero(bst[len(out):]) {
			return 0, fmt.Errorf("%w: block %d: non-zero padding", ErrCorrupt, i)
		}
		copy(out, bst)
		got = crc(out)
	case Zip3:
		cnt, err := zip3Escapes(idx, n, dyn, i)
		if err != nil {
			return 0, err
		}
		w := zip3.Window{Mode: idx[8], Base: idx[9]}
		d.z.Ahead = 0
		if i+1 < p.nblocks {
			d.z.Ahead = sl
		}
		c, err := d.z.DecodeBlock(out, bst, dyn[:cnt], p.f, w)
		if err != nil {
			return 0, fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
		}
		got = c
		used = cnt
	case Huff:
		if !allZero(idx[4:]) {
			return 0, fmt.Errorf("%w: block %d: reserved index bytes", ErrCorrupt, i)
		}
		syms := out // fp8: symbols are the elements
		if p.f == zip3.BF16 || p.f == zip3.FP32 || p.f == zip3.FP16 {
			if cap(d.syms) < n {
				d.syms = make([]byte, 1<<huffBlockLog)
			}
			syms = d.syms[:n]
			if !huffPadOK(p.f, bst, n) {
				return 0, fmt.Errorf("%w: block %d: non-zero padding", ErrCorrupt, i)
			}
		}
		m, err := d.h.DecodeBlock(syms, dyn)
		if err != nil {
			return 0, fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
		}
		used = m
		// merged and checksummed in one pass
		switch p.f {
		case zip3.BF16:
			got = mergeBF16CRC(out, bst, syms, d.z.Stream)
		case zip3.FP16:
			got = mergeFP16CRC(out, bst, syms, d.z.Stream)
		case zip3.FP32:
			np := len(bst) / 3
			got = mergeFP32WCRC(out, bst[:np], bst[np:], syms, &d.hi, d.z.Stream)
		default:
			got = crc(out) // fp8: the symbols are the elements
		}
	case Huff2, Huff2Packed:
		if !allZero(idx[4:]) {
			return 0, fmt.Errorf("%w: block %d: reserved index bytes", ErrCorrupt, i)
		}
		if d.h2 == nil {
			d.h2 = new(huff2Decoder)
		}
		m, c, err := d.h2.decodeBlock(out, p.f, dyn, n, p.lens(), d.z.Stream)
		if err != nil {
			return 0, fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
		}
		used = m
		got = c
	}
	if want := binary.LittleEndian.Uint32(idx[0:]); got != want {
		return 0, fmt.Errorf("%w: block %d: crc %08x, want %08x", ErrChecksum, i, got, want)
	}
	return used, nil
}

// zip3Escapes is the escape count of zip3 block i (index entry idx, n
// elements), checked against the dyn bytes left.
func zip3Escapes(idx []byte, n int, dyn []byte, i int) (int, error) {
	cnt := int(binary.LittleEndian.Uint32(idx[4:]))
	if !allZero(idx[10:]) {
		return 0, fmt.Errorf("%w: block %d: reserved index bytes", ErrCorrupt, i)
	}
	if cnt > n || cnt > len(dyn) {
		return 0, fmt.Errorf("%w: block %d: %d escapes, %d bytes left", ErrCorrupt, i, cnt, len(dyn))
	}
	return cnt, nil
}

// dynLen is how many dynamic bytes block i uses, read from its index entry
// or its records' headers without decoding it.
func (p *plan) dynLen(st, dyn []byte, i int) (int, error) {
	_, n, _, _ := p.block(i)
	switch p.kind {
	case Zip3:
		return zip3Escapes(p.index(st, i), n, dyn, i)
	case Huff:
		m, err := huff.RecordLen(dyn, n, huff.Lens32)
		if err != nil {
			return 0, fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
		}
		return m, nil
	case Huff2, Huff2Packed:
		m, err := huff2RecordsLen(p.f, dyn, n, p.lens())
		if err != nil {
			return 0, fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
		}
		return m, nil
	}
	return 0, nil
}

// decodeParallel is decode on up to threads goroutines, the caller's
// among them (shareRuns), each taking runs of whole blocks: the blocks are
// independent, and their dynamic offsets are found first from the records'
// headers. One run a thread; a caller that finishes its run before a
// helper has started takes the helper's too. Four runs a thread balanced a
// late start better on the demo's float16 weights (0.53 against 0.60 ms)
// but made fresh 45 MB outputs decode at one thread's speed or slower at
// the median in some processes, and so did stealing single blocks from
// the end of each other's share (benchmarks/CODEC.md). The error
// reported is the first block's that fails, as one thread would report.
func decodeParallel(dst, st, dyn []byte, p *plan, threads int) error {
	if err := p.checkFrame(st, dyn); err != nil {
		return err
	}
	offs := make([]int, p.nblocks+1)
	for i := range p.nblocks {
		m, err := p.dynLen(st, dyn[offs[i]:], i)
		if err != nil {
			return err
		}
		offs[i+1] = offs[i] + m
	}
	if err := p.checkEnd(dyn, offs[p.nblocks]); err != nil {
		return err
	}
	stream := len(dst) >= decStreamMin
	run := max(1, max(decodeThreadElems, p.numel/threads)>>p.blockLog) // blocks
	nruns := (p.nblocks + run - 1) / run
	errs := make([]error, nruns)
	shareRuns(threads, nruns, func(_ bool, next func() (int, bool)) {
		d := decPool.Get().(*Decoder)
		defer decPool.Put(d)
		d.z.Stream = stream
		for r, ok := next(); ok; r, ok = next() {
			i0, i1 := r*run, min((r+1)*run, p.nblocks)
			off, err := d.decodeBlocks(dst, st, dyn[:offs[i1]], p, i0, i1, offs[i0])
			if err == nil && off != offs[i1] {
				err = fmt.Errorf("%w: blocks %d..%d used %d dynamic bytes, their headers say %d", ErrCorrupt, i0, i1-1, off-offs[i0], offs[i1]-offs[i0])
			}
			errs[r] = err
		}
	})
	return firstErr(errs)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func huffPadOK(f zip3.Format, st []byte, n int) bool {
	if f == zip3.FP32 {
		np := len(st) / 3
		return allZero(st[n:np]) && allZero(st[np+2*n:])
	}
	return allZero(st[n:])
}

func allZero(b []byte) bool {
	var acc byte
	for _, v := range b {
		acc |= v
	}
	return acc == 0
}
