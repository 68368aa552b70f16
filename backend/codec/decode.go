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
	h, p, err := parseHeader(src)
	if err != nil {
		return 0, err
	}
	if len(dst) != h.RawLen {
		return 0, fmt.Errorf("%w: dst is %d bytes, frame holds %d", ErrSize, len(dst), h.RawLen)
	}
	if len(src) < h.FrameLen {
		return 0, fmt.Errorf("%w: frame is %d bytes, have %d", ErrTruncated, h.FrameLen, len(src))
	}
	st := src[HeaderLen : HeaderLen+h.StaticLen]
	dyn := src[HeaderLen+h.StaticLen : h.FrameLen]
	if err := d.decode(dst, st, dyn, &p); err != nil {
		return 0, err
	}
	return h.FrameLen, nil
}

// DecodeSplit decodes a tensor from its static and dynamic parts (as made by
// EncodeStatic and EncodeDynamic, or the two sections of a frame). dt and k
// must be those used to encode (k as reported by Encoder.Kind); the element
// count is len(dst)/dt.Size(); len(static) must be StaticLen and dynamic
// must be exactly the dynamic part.
func (d *Decoder) DecodeSplit(dst, static, dynamic []byte, dt dtype.DType, k Kind) error {
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
	if p.kind == Raw && len(dyn) != 0 {
		return fmt.Errorf("%w: raw frame with a dynamic part", ErrCorrupt)
	}
	if !allZero(st[IndexEntry*p.nblocks : p.indexLen]) {
		return fmt.Errorf("%w: index padding", ErrCorrupt)
	}
	d.z.Stream = len(dst) >= decStreamMin
	off := 0 // position in dyn
	var got uint32
	for i := 0; i < p.nblocks; i++ {
		e0, n, s0, sl := p.block(i)
		out := dst[e0*p.size : (e0+n)*p.size]
		idx := st[IndexEntry*i : IndexEntry*(i+1)]
		bst := st[s0 : s0+sl]
		switch p.kind {
		case Raw:
			if !allZero(idx[4:]) || !allZero(bst[len(out):]) {
				return fmt.Errorf("%w: block %d: non-zero padding", ErrCorrupt, i)
			}
			copy(out, bst)
			got = crc(out)
		case Zip3:
			cnt := int(binary.LittleEndian.Uint32(idx[4:]))
			if !allZero(idx[10:]) {
				return fmt.Errorf("%w: block %d: reserved index bytes", ErrCorrupt, i)
			}
			if cnt > n || cnt > len(dyn)-off {
				return fmt.Errorf("%w: block %d: %d escapes, %d bytes left", ErrCorrupt, i, cnt, len(dyn)-off)
			}
			w := zip3.Window{Mode: idx[8], Base: idx[9]}
			d.z.Ahead = 0
			if i+1 < p.nblocks {
				d.z.Ahead = sl
			}
			c, err := d.z.DecodeBlock(out, bst, dyn[off:off+cnt], p.f, w)
			if err != nil {
				return fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
			}
			got = c
			off += cnt
		case Huff:
			if !allZero(idx[4:]) {
				return fmt.Errorf("%w: block %d: reserved index bytes", ErrCorrupt, i)
			}
			syms := out // fp8: symbols are the elements
			if p.f == zip3.BF16 || p.f == zip3.FP32 || p.f == zip3.FP16 {
				if cap(d.syms) < n {
					d.syms = make([]byte, 1<<huffBlockLog)
				}
				syms = d.syms[:n]
				if !huffPadOK(p.f, bst, n) {
					return fmt.Errorf("%w: block %d: non-zero padding", ErrCorrupt, i)
				}
			}
			m, err := d.h.DecodeBlock(syms, dyn[off:])
			if err != nil {
				return fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
			}
			off += m
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
		case Huff2:
			if !allZero(idx[4:]) {
				return fmt.Errorf("%w: block %d: reserved index bytes", ErrCorrupt, i)
			}
			if d.h2 == nil {
				d.h2 = new(huff2Decoder)
			}
			m, c, err := d.h2.decodeBlock(out, p.f, dyn[off:], n, d.z.Stream)
			if err != nil {
				return fmt.Errorf("%w: block %d: %w", ErrCorrupt, i, err)
			}
			off += m
			got = c
		}
		if want := binary.LittleEndian.Uint32(idx[0:]); got != want {
			return fmt.Errorf("%w: block %d: crc %08x, want %08x", ErrChecksum, i, got, want)
		}
	}
	if alignUp(off) != len(dyn) || !allZero(dyn[off:]) {
		return fmt.Errorf("%w: dynamic part is %d bytes, %d used", ErrCorrupt, len(dyn), off)
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
