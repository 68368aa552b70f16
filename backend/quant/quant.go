// Package quant is zipccl's opt-in lossy coding of float tensors for the
// wire: blockwise symmetric int8 (ZeRO++'s qwZ), one fp32 scale per block.
// It is never used unless the user asked for it (package lossy holds the
// policy and the collectives).
//
// Each block of B elements is widened to float32 and coded as
//
//	absmax = max |x|          s = absmax / 127      inv = 127 / absmax
//	q      = rne(x * inv)     x' = narrow(q * s)
//
// every operation a float32 one rounded to nearest even, so that a CUDA
// kernel gives the same bytes. +absmax maps to exactly +127: no value is
// clipped (DeepSpeed's formula, 2^b / (2 absmax), maps it to 128 and clips
// it to 127). An all-zero block has s = 0 and decodes to zeros. A block
// holding a NaN or an infinity travels exact, so that overflow stays
// visible. The error of a finite block is at most s/2 per element, plus the
// rounding of x' to the tensor's dtype.
//
// A coded tensor is one message of two parts (docs/FORMAT.md, "Lossy
// messages"): the main part, whose length depends on (numel, block) only,
// so that a collective can size it in advance, and the exact part, the raw
// bytes of the blocks that travel exact (usually empty).
package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
)

// Mode is a lossy coding.
type Mode uint8

const (
	None Mode = 0 // lossless: not coded by this package
	Int8 Mode = 1 // blockwise symmetric int8
)

func (m Mode) String() string {
	switch m {
	case None:
		return "none"
	case Int8:
		return "int8"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// HeaderLen is the length of a main part's header.
const HeaderLen = 24

// exactScale marks a block that travels exact (a NaN pattern, which no
// finite block's scale can be).
const exactScale = 0xFFFFFFFF

// Supported reports whether dt can be coded (float32, bfloat16, float16).
func Supported(dt dtype.DType) bool {
	return dt == dtype.Float32 || dt == dtype.BFloat16 || dt == dtype.Float16
}

// Blocks is the number of blocks of numel elements.
func Blocks(numel, block int) int { return (numel + block - 1) / block }

// MainLen is the length of the main part for numel elements in blocks of
// block: the header, one fp32 scale per block, one int8 per element.
func MainLen(numel, block int) int { return HeaderLen + 4*Blocks(numel, block) + numel }

// ErrCorrupt reports a message that does not decode.
var ErrCorrupt = errors.New("quant: corrupt message")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// checkBlock validates a block size: a power of two from 32 to 65536.
func checkBlock(block int) error {
	if block < 32 || block > 1<<16 || block&(block-1) != 0 {
		return fmt.Errorf("quant: block size %d: want a power of two from 32 to 65536", block)
	}
	return nil
}

// Encode codes src (whole elements of dt) in blocks of block elements:
// main (MainLen bytes) is written into main[:MainLen] and the exact part
// appended to exact, which is returned.
func Encode(main []byte, exact []byte, src []byte, dt dtype.DType, mode Mode, block int) ([]byte, error) {
	if mode != Int8 {
		return exact, fmt.Errorf("quant: unknown mode %v", mode)
	}
	if !Supported(dt) {
		return exact, fmt.Errorf("quant: %v cannot be coded lossily (float32, bfloat16 and float16 can)", dt)
	}
	if err := checkBlock(block); err != nil {
		return exact, err
	}
	es := dt.Size()
	if len(src)%es != 0 {
		return exact, fmt.Errorf("quant: %d bytes is not a whole number of %v elements", len(src), dt)
	}
	numel := len(src) / es
	nb := Blocks(numel, block)
	if len(main) < MainLen(numel, block) {
		return exact, fmt.Errorf("quant: main part needs %d bytes, got %d", MainLen(numel, block), len(main))
	}
	main = main[:MainLen(numel, block)]
	scales := main[HeaderLen : HeaderLen+4*nb]
	q := main[HeaderLen+4*nb:]
	x := make([]float32, block)
	nexact := 0
	for b := range nb {
		lo, hi := b*block, min(numel, (b+1)*block)
		raw := src[lo*es : hi*es]
		absmax, finite := absMax(dt, raw)
		if !finite {
			binary.LittleEndian.PutUint32(scales[4*b:], exactScale)
			clear(q[lo:hi])
			exact = append(exact, raw...)
			nexact++
			continue
		}
		binary.LittleEndian.PutUint32(scales[4*b:], math.Float32bits(absmax/127))
		if absmax == 0 {
			clear(q[lo:hi])
			continue
		}
		quantize(dt, q[lo:hi], raw, x, 127/absmax)
	}
	putHeader(main, mode, dt, numel, block, nexact)
	return exact, nil
}

func putHeader(h []byte, mode Mode, dt dtype.DType, numel, block, nexact int) {
	h[0], h[1], h[2], h[3] = 'Z', 'Q', 1, byte(mode)
	h[4] = byte(dt)
	h[5] = byte(log2(block))
	h[6], h[7] = 0, 0
	binary.LittleEndian.PutUint64(h[8:], uint64(numel))
	binary.LittleEndian.PutUint32(h[16:], uint32(nexact))
	binary.LittleEndian.PutUint32(h[20:], 0)
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// Header is what a main part says of itself.
type Header struct {
	Mode  Mode
	DType dtype.DType
	Numel int
	Block int
	Exact int // blocks that travel exact
}

// ExactLen is the length of the exact part that goes with the main part h
// describes: the raw bytes of its exact blocks (the last one may be short).
func (h Header) ExactLen(main []byte) int {
	if h.Exact == 0 {
		return 0
	}
	nb := Blocks(h.Numel, h.Block)
	n := 0
	for b := range nb {
		if binary.LittleEndian.Uint32(main[HeaderLen+4*b:]) == exactScale {
			n += (min(h.Numel, (b+1)*h.Block) - b*h.Block) * h.DType.Size()
		}
	}
	return n
}

// PeekHeader parses and checks a main part's header and length.
func PeekHeader(main []byte) (Header, error) {
	if len(main) < HeaderLen {
		return Header{}, corrupt("%d bytes, shorter than a header", len(main))
	}
	if main[0] != 'Z' || main[1] != 'Q' || main[2] != 1 {
		return Header{}, corrupt("bad magic or version % x", main[:3])
	}
	h := Header{Mode: Mode(main[3]), DType: dtype.DType(main[4]), Block: 1 << main[5]}
	if h.Mode != Int8 || !Supported(h.DType) || main[5] > 16 || main[6]|main[7] != 0 ||
		binary.LittleEndian.Uint32(main[20:]) != 0 || checkBlock(h.Block) != nil {
		return Header{}, corrupt("bad header % x", main[:8])
	}
	numel := binary.LittleEndian.Uint64(main[8:])
	if numel > uint64(len(main)) {
		return Header{}, corrupt("%d elements in a %d-byte main part", numel, len(main))
	}
	h.Numel = int(numel)
	h.Exact = int(binary.LittleEndian.Uint32(main[16:]))
	if len(main) != MainLen(h.Numel, h.Block) {
		return Header{}, corrupt("main part of %d bytes, want %d", len(main), MainLen(h.Numel, h.Block))
	}
	if h.Exact > Blocks(h.Numel, h.Block) {
		return Header{}, corrupt("%d exact blocks of %d", h.Exact, Blocks(h.Numel, h.Block))
	}
	return h, nil
}

// Decode decodes a message (main and exact parts) of len(dst) bytes of dt
// into dst.
func Decode(dst, main, exact []byte, dt dtype.DType) error {
	h, err := PeekHeader(main)
	if err != nil {
		return err
	}
	es := dt.Size()
	if h.DType != dt || h.Numel*es != len(dst) {
		return corrupt("message of %d %v elements, want %d bytes of %v", h.Numel, h.DType, len(dst), dt)
	}
	nb := Blocks(h.Numel, h.Block)
	scales := main[HeaderLen : HeaderLen+4*nb]
	q := main[HeaderLen+4*nb:]
	var tab [256]uint32
	seen := 0
	for b := range nb {
		lo, hi := b*h.Block, min(h.Numel, (b+1)*h.Block)
		bits := binary.LittleEndian.Uint32(scales[4*b:])
		if bits == exactScale {
			n := (hi - lo) * es
			if len(exact) < n {
				return corrupt("exact part ends in block %d", b)
			}
			copy(dst[lo*es:hi*es], exact[:n])
			exact = exact[n:]
			seen++
			continue
		}
		s := math.Float32frombits(bits)
		if !(s >= 0 && s <= math.MaxFloat32/127) || math.Signbit(float64(s)) {
			return corrupt("block %d: scale %v", b, s)
		}
		if !dequantize(dt, dst[lo*es:hi*es], q[lo:hi], s, &tab) {
			return corrupt("block %d: code -128", b)
		}
	}
	if seen != h.Exact || len(exact) != 0 {
		return corrupt("%d exact blocks marked, %d in the header, %d exact bytes left over", seen, h.Exact, len(exact))
	}
	return nil
}

// absMax is the largest magnitude of a block of dt, and false if the block
// holds a NaN or an infinity. Magnitudes are compared as integers: for
// IEEE formats their order is the values' order (NaNs above infinity).
func absMax(dt dtype.DType, src []byte) (float32, bool) {
	switch dt {
	case dtype.Float32:
		var m uint32
		for i := 0; i+4 <= len(src); i += 4 {
			m = max(m, binary.LittleEndian.Uint32(src[i:])&0x7FFFFFFF)
		}
		return math.Float32frombits(m), m < 0x7F800000
	case dtype.BFloat16:
		var m uint16
		for i := 0; i+2 <= len(src); i += 2 {
			m = max(m, binary.LittleEndian.Uint16(src[i:])&0x7FFF)
		}
		return dtype.BF16ToF32(m), m < 0x7F80
	default: // float16
		var m uint16
		for i := 0; i+2 <= len(src); i += 2 {
			m = max(m, binary.LittleEndian.Uint16(src[i:])&0x7FFF)
		}
		return dtype.F16ToF32(m), m < 0x7C00
	}
}

// rne is 1.5 * 2^23: for |y| < 2^22, (y + rne) - rne in float32 is y
// rounded to an integer, ties to even (the sum's ulp is 1).
const rne = 12582912

// quantize sets q[i] = rne(x[i] * inv) for the elements of src. |x| <=
// absmax makes |x*inv| at most 127 plus float32 rounding, so the code is
// within [-127, 127]. x is scratch (float16 and float32 widen into it).
func quantize(dt dtype.DType, q, src []byte, x []float32, inv float32) {
	code := func(v float32) byte {
		y := float32(v * inv) // conversions: never fused into one FMA
		r := float32(y+rne) - rne
		return byte(int8(r))
	}
	if dt == dtype.BFloat16 {
		q = q[:len(src)/2]
		for i := range q {
			q[i] = code(math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16))
		}
		return
	}
	xs := x[:len(src)/dt.Size()]
	widen(dt, xs, src)
	q = q[:len(xs)]
	for i, v := range xs {
		q[i] = code(v)
	}
}

// dequantize sets dst[i] = narrow(q[i] * s), false if a code is -128
// (nothing written then). A block has 2048 elements and 255 codes: each
// code's value is computed once, into tab, and the elements are looked up.
func dequantize(dt dtype.DType, dst, q []byte, s float32, tab *[256]uint32) bool {
	if bytes.IndexByte(q, 0x80) >= 0 {
		return false
	}
	for c := range 256 {
		v := float32(int8(c)) * s // finite, as is its rounding below
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
	if dt.Size() == 2 {
		dst = dst[:2*len(q)]
		for i := 0; i+1 < len(dst); i += 2 {
			v := tab[q[i/2]]
			dst[i], dst[i+1] = byte(v), byte(v>>8)
		}
		return true
	}
	dst = dst[:4*len(q)]
	for i, c := range q {
		binary.LittleEndian.PutUint32(dst[4*i:], tab[c])
	}
	return true
}

// widen sets d[i] to src's elements as float32 (exact).
func widen(dt dtype.DType, d []float32, src []byte) {
	if dt != dtype.Float32 {
		reduce.Widen(dt, d, src) // bfloat16, float16
		return
	}
	for i := range d {
		d[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}
