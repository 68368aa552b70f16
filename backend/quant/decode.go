package quant

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/reduce"
)

// block is one block of a message as walk hands it over: its elements
// [lo, hi), and either its scale and codes or, for an exact block, its raw
// bytes (of the message's dtype).
type block struct {
	lo, hi int
	scale  float32
	codes  []byte
	raw    []byte
}

// walk checks a message (main and exact parts) and calls f for each block
// in order; it stops at f's first false (a bad code) and reports it.
func walk(main, exact []byte, f func(b block) bool) (Header, error) {
	h, err := PeekHeader(main)
	if err != nil {
		return h, err
	}
	es := h.DType.Size()
	nb := Blocks(h.Numel, h.Block)
	sl := h.Mode.scaleLen()
	scales := main[HeaderLen : HeaderLen+sl*nb]
	codes := main[HeaderLen+sl*nb:]
	if h.Mode == Int4 && h.Numel%2 == 1 && codes[len(codes)-1]&15 != 0 {
		return h, corrupt("int4 padding nibble %#x", codes[len(codes)-1]&15)
	}
	seen := 0
	for b := range nb {
		k := block{lo: b * h.Block, hi: min(h.Numel, (b+1)*h.Block)}
		bits := binary.LittleEndian.Uint32(scales[sl*b:])
		if bits == exactScale {
			n := (k.hi - k.lo) * es
			if len(exact) < n {
				return h, corrupt("exact part ends in block %d", b)
			}
			k.raw, exact = exact[:n], exact[n:]
			seen++
		} else {
			k.scale = math.Float32frombits(bits)
			if !(k.scale >= 0 && k.scale <= math.MaxFloat32/h.Mode.qmax()) || math.Signbit(float64(k.scale)) {
				return h, corrupt("block %d: scale %v", b, k.scale)
			}
			k.codes = codes[h.Mode.CodesLen(k.lo, h.Block):h.Mode.CodesLen(k.hi, h.Block)]
			if h.Mode == FP8 { // α is checked, never needed to decode
				alpha := math.Float32frombits(binary.LittleEndian.Uint32(scales[sl*b+4:]))
				if !(alpha >= 0 && alpha <= math.MaxFloat32) || math.Signbit(float64(alpha)) {
					return h, corrupt("block %d: alpha %v", b, alpha)
				}
			}
			if !validCodes(h.Mode, k.codes) {
				return h, corrupt("block %d: %s", b, h.Mode.badCode())
			}
		}
		if !f(k) {
			return h, corrupt("block %d", b)
		}
	}
	if seen != h.Exact || len(exact) != 0 {
		return h, corrupt("%d exact blocks marked, %d in the header, %d exact bytes left over", seen, h.Exact, len(exact))
	}
	return h, nil
}

// validCodes reports that no code is -128 (int8), -8 (int4) or an E4M3 NaN
// (fp8): none is ever coded, so one means a corrupt message.
func validCodes(m Mode, codes []byte) bool {
	switch m {
	case Int8:
		return bytes.IndexByte(codes, 0x80) < 0
	case FP8:
		return bytes.IndexByte(codes, 0x7F) < 0 && bytes.IndexByte(codes, 0xFF) < 0
	}
	// a nibble of 8 is a zero nibble of c ^ 0x88...: found eight at a time
	// by the borrow trick, exact for "is there one"
	const ones, highs = 0x1111111111111111, 0x8888888888888888
	i := 0
	for ; i+8 <= len(codes); i += 8 {
		x := binary.LittleEndian.Uint64(codes[i:]) ^ highs
		if (x-ones)&^x&highs != 0 {
			return false
		}
	}
	for _, c := range codes[i:] {
		if c&0xF0 == 0x80 || c&15 == 8 {
			return false
		}
	}
	return true
}

// badCode names the code validCodes refuses.
func (m Mode) badCode() string {
	switch m {
	case FP8:
		return "E4M3 NaN code"
	case Int4:
		return "code -8"
	}
	return "code -128"
}

// Decode decodes a message (main and exact parts) into dst, len(dst) bytes
// of dt: the message's own dtype, or a narrower one when the message codes
// float32 (then x' is rounded to dt once, as a float32 decode then a cast
// would).
func Decode(dst, main, exact []byte, dt dtype.DType) error {
	h, err := PeekHeader(main)
	if err != nil {
		return err
	}
	es := dt.Size()
	if !(h.DType == dt || h.DType == dtype.Float32 && Supported(dt)) || h.Numel*es != len(dst) {
		return corrupt("message of %d %v elements, want %d bytes of %v", h.Numel, h.DType, len(dst), dt)
	}
	var tab [256]uint32
	var wide []float32 // float32 exact blocks narrowed to dt
	var f *fp8Scratch
	if h.Mode == FP8 {
		f = newFP8Scratch(h.Block)
	}
	_, err = walk(main, exact, func(b block) bool {
		out := dst[b.lo*es : b.hi*es]
		if b.raw != nil {
			if h.DType == dt {
				copy(out, b.raw)
				return true
			}
			wide = append(wide[:0], bufs.Float32s(b.raw)...)
			reduce.Narrow(dt, out, wide)
			return true
		}
		if f != nil {
			f.decodeTo(dt, out, b.codes, b.scale)
			return true
		}
		codeTable(h.Mode, dt, b.scale, &tab)
		expand(h.Mode, es, out, b.codes, &tab)
		return true
	})
	return err
}

// Accumulate adds a message's decoded values to acc in float32: acc[i] +=
// q*s (the product rounded to float32, then the sum), or, with first,
// sets acc[i] = q*s. Exact blocks add their elements widened to float32,
// so NaN and infinities reach acc.
func Accumulate(acc []float32, main, exact []byte, first bool) error {
	h, err := PeekHeader(main)
	if err != nil {
		return err
	}
	if h.Numel != len(acc) {
		return corrupt("message of %d elements, want %d", h.Numel, len(acc))
	}
	var tab [256]float32
	var wide []float32
	var f *fp8Scratch
	if h.Mode == FP8 {
		f = newFP8Scratch(h.Block)
	}
	_, err = walk(main, exact, func(b block) bool {
		a := acc[b.lo:b.hi]
		if b.raw == nil && f != nil {
			f.accumulate(a, b.codes, b.scale, first)
			return true
		}
		if b.raw != nil { // exact blocks
			if h.DType == dtype.Float32 {
				wide = append(wide[:0], bufs.Float32s(b.raw)...)
			} else {
				wide = append(wide[:0], make([]float32, len(a))...)
				reduce.Widen(h.DType, wide, b.raw)
			}
			if first {
				copy(a, wide)
			} else {
				for i, v := range wide {
					a[i] += v
				}
			}
			return true
		}
		done := accSIMD(h.Mode, a, b.codes, b.scale, first)
		a = a[done:]
		if len(a) == 0 {
			return true
		}
		codes := b.codes[h.Mode.CodesLen(done, h.Block):] // done is even
		if h.Mode == Int8 {
			for c := range 256 {
				tab[c] = codeValue(Int8, byte(c)) * b.scale
			}
			for i, c := range codes {
				if first {
					a[i] = tab[c]
				} else {
					a[i] += tab[c]
				}
			}
			return true
		}
		for c := range 16 {
			tab[c] = codeValue(Int4, byte(c)) * b.scale
		}
		for i := range a {
			c := codes[i/2] >> 4
			if i%2 == 1 {
				c = codes[i/2] & 15
			}
			if first {
				a[i] = tab[c]
			} else {
				a[i] += tab[c]
			}
		}
		return true
	})
	return err
}

// codeValue is the value of a code byte (int8) or nibble (int4, in c's low
// four bits; the high ones are ignored).
func codeValue(m Mode, c byte) float32 {
	if m == Int4 {
		return float32(int8(c<<4) >> 4)
	}
	return float32(int8(c))
}

// codeTable sets tab[c] to code c's decoded value q*s rounded to dt, as
// dt's bits. A block of 2048 elements has at most 255 codes: each code's
// value is computed once and the elements looked up.
func codeTable(m Mode, dt dtype.DType, s float32, tab *[256]uint32) {
	n := 256
	if m == Int4 {
		n = 16
	}
	for c := range n {
		v := codeValue(m, byte(c)) * s // finite, as is its rounding below
		switch dt {
		case dtype.BFloat16:
			u := math.Float32bits(v)
			tab[c] = (u + 0x7FFF + (u >> 16 & 1)) >> 16 // dtype.F32ToBF16 without its NaN test
		case dtype.Float16:
			tab[c] = uint32(dtype.F32ToF16(v))
		default:
			tab[c] = math.Float32bits(v)
		}
	}
}

// expand writes the elements of codes (each looked up in tab) into out,
// elements of es bytes.
func expand(m Mode, es int, out, codes []byte, tab *[256]uint32) {
	put := func(i int, v uint32) {
		if es == 2 {
			out[2*i], out[2*i+1] = byte(v), byte(v>>8)
		} else {
			binary.LittleEndian.PutUint32(out[4*i:], v)
		}
	}
	if m == Int8 {
		if es == 2 {
			out = out[:2*len(codes)]
			for i := 0; i+1 < len(out); i += 2 {
				v := tab[codes[i/2]]
				out[i], out[i+1] = byte(v), byte(v>>8)
			}
			return
		}
		for i, c := range codes {
			put(i, tab[c])
		}
		return
	}
	numel := len(out) / es
	for k, c := range codes {
		put(2*k, tab[c>>4])
		if 2*k+1 < numel {
			put(2*k+1, tab[c&15])
		}
	}
}
