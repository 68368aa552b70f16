package codec

import (
	"encoding/binary"
	"fmt"

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
	rawFrame := HeaderLen + mustPlan(p.numel, dt, Raw).staticLen
	want := HeaderLen + p.staticLen + Align
	if p.kind == Huff {
		want += p.numel + 3<<huffBlockLog
	} else if p.kind == Huff2 {
		// every plane raw plus its mode byte, and the stream coder's room
		want += p.numel*p.size + 4*p.nblocks + 3<<huff2BlockLog
	} else if p.kind == Zip3 {
		want += p.numel / 16
	}
	dst = grow(dst, want)
	dst = dst[:start+HeaderLen]
	fused := p.kind == Huff || p.kind == Huff2
	dst = e.appendStatic(dst, src, &p, fused)
	dst = e.appendDynamic(dst, src, &p, fused)
	dst = padTo(dst, start+HeaderLen+p.staticLen)
	if len(dst)-start > rawFrame && p.kind != Raw {
		p = mustPlan(p.numel, dt, Raw)
		e.kind = Raw
		dst = grow(dst[:start], rawFrame)[:start+HeaderLen]
		dst = e.appendStatic(dst, src, &p, false)
	}
	putHeader(dst[start:], &p, len(dst)-start-HeaderLen-p.staticLen)
	return dst, nil
}

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
// Auto is resolved here; Kind reports the choice.
func (e *Encoder) EncodeStatic(dst, src []byte, dt dtype.DType, k Kind) ([]byte, error) {
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

// appendStatic appends p.staticLen bytes. With fused (Huff, Huff2) it also
// codes each block and appends the records after the static part, so that
// appendDynamic only pads.
func (e *Encoder) appendStatic(dst, src []byte, p *plan, fused bool) []byte {
	base := len(dst)
	dst = dst[:base+p.staticLen]
	clear(dst[base : base+p.indexLen])
	e.esc = e.esc[:0]
	e.h.Reset() // output depends on this tensor only
	if p.kind == Huff2 {
		if e.h2 == nil {
			e.h2 = new(huff2Encoder)
		}
		e.h2.reset()
	}
	e.z.Stream = len(src) >= encStreamMin
	for i := 0; i < p.nblocks; i++ {
		st := dst[base : base+p.staticLen] // dst may move when records are appended
		e0, n, s0, sl := p.block(i)
		blk := src[e0*p.size : (e0+n)*p.size]
		idx := st[IndexEntry*i : IndexEntry*(i+1)]
		bst := st[s0 : s0+sl]
		switch p.kind {
		case Raw:
			binary.LittleEndian.PutUint32(idx[0:], crc(blk))
			copy(bst, blk)
			clear(bst[len(blk):])
		case Huff2:
			binary.LittleEndian.PutUint32(idx[0:], crc(blk))
			if fused {
				dst = e.h2.appendBlock(dst, p.f, blk, n)
			}
		case Zip3:
			e.z.Ahead = 0
			if i+1 < p.nblocks {
				e.z.Ahead = len(blk)
			}
			w := zip3.ChooseWindow(p.f, blk, n)
			var cnt int
			var c uint32
			e.esc, cnt, c = e.z.EncodeBlock(bst, e.esc, blk, p.f, w)
			binary.LittleEndian.PutUint32(idx[0:], c)
			binary.LittleEndian.PutUint32(idx[4:], uint32(cnt))
			idx[8] = w.Mode
			idx[9] = w.Base
		case Huff:
			binary.LittleEndian.PutUint32(idx[0:], crc(blk))
			syms := huffSplit(p.f, bst, e.symScratch(n), blk, &e.hi)
			if fused {
				dst = e.h.AppendBlock(dst, syms)
			}
		}
	}
	return dst
}

func (e *Encoder) symScratch(n int) []byte {
	if cap(e.syms) < n {
		e.syms = make([]byte, 1<<huffBlockLog)
	}
	return e.syms[:n]
}

// appendDynamic appends the dynamic part, unpadded. fused: the Huff/Huff2 records
// were already appended by appendStatic.
func (e *Encoder) appendDynamic(dst, src []byte, p *plan, fused bool) []byte {
	switch p.kind {
	case Zip3:
		dst = append(dst, e.esc...)
		e.esc = e.esc[:0]
	case Huff:
		if fused {
			return dst
		}
		e.h.Reset()
		for i := 0; i < p.nblocks; i++ {
			e0, n, _, _ := p.block(i)
			blk := src[e0*p.size : (e0+n)*p.size]
			dst = e.h.AppendBlock(dst, huffSyms(p.f, e.symScratch(n), blk))
		}
	case Huff2:
		if fused {
			return dst
		}
		e.h2.reset()
		for i := 0; i < p.nblocks; i++ {
			e0, n, _, _ := p.block(i)
			dst = e.h2.appendBlock(dst, p.f, src[e0*p.size:(e0+n)*p.size], n)
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
