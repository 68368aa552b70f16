// Package zip3 implements the block layout of ZipCCL's fixed 3-bit exponent
// code: each element's exponent field is replaced by a 3-bit code (stored as
// three 1-bit planes per 32-element group); code 0 is an escape whose full
// exponent field goes to a separate escape list. Everything except the escape
// list has a size that depends on the element count only (the "static" part).
//
// The byte layout is specified in docs/FORMAT.md; this package produces and
// consumes the static arrays of one block and its escape bytes. Framing,
// checksums and block indexing live in package codec.
package zip3

import (
	"errors"
	"fmt"
)

// Format selects how an element's bits are split.
type Format uint8

const (
	BF16 Format = iota + 1
	FP32
	FP16
	E5M2
	E4M3
)

// Window modes stored in the block index.
const (
	// ModePlain: codes 1..7 stand for exponent fields Base..Base+6.
	ModePlain = 0
	// ModeZero: code 1 stands for exponent field 0 (zeros, subnormals),
	// codes 2..7 for Base..Base+5.
	ModeZero = 1
)

// SampleSize is the number of elements sampled per block to choose the window.
const SampleSize = 64

// MaxBlock is the largest block (in elements) the package accepts.
const MaxBlock = 1 << 20

var (
	// ErrCorrupt reports a malformed block.
	ErrCorrupt = errors.New("zip3: corrupt block")
)

type spec struct {
	size     int    // bytes per element
	expShift uint   // position of the exponent field
	expBits  uint   // width of the exponent field
	mantBits uint   // mantissa width (below the exponent)
	bias     int    // exponent bias
	r8       bool   // a residue byte array
	r16      bool   // a residue uint16 array (fp32 low halves)
	qbits    []uint // residue bits stored as extra bit planes, in plane order
}

var specs = [...]spec{
	BF16: {size: 2, expShift: 7, expBits: 8, mantBits: 7, bias: 127, r8: true},
	FP32: {size: 4, expShift: 23, expBits: 8, mantBits: 23, bias: 127, r8: true, r16: true},
	FP16: {size: 2, expShift: 10, expBits: 5, mantBits: 10, bias: 15, r8: true, qbits: []uint{8, 9, 15}},
	E5M2: {size: 1, expShift: 2, expBits: 5, mantBits: 2, bias: 15, qbits: []uint{0, 1, 7}},
	E4M3: {size: 1, expShift: 3, expBits: 4, mantBits: 3, bias: 7, qbits: []uint{0, 1, 2, 7}},
}

func (f Format) valid() bool { return f >= BF16 && f <= E4M3 }

func (f Format) spec() *spec {
	if !f.valid() {
		panic(fmt.Sprintf("zip3: invalid format %d", f))
	}
	return &specs[f]
}

// ElemSize returns the element size in bytes.
func (f Format) ElemSize() int { return f.spec().size }

// MaxField is the largest exponent field value of the format.
func (f Format) MaxField() int { return 1<<f.spec().expBits - 1 }

func (f Format) String() string {
	switch f {
	case BF16:
		return "bf16"
	case FP32:
		return "fp32"
	case FP16:
		return "fp16"
	case E5M2:
		return "e5m2"
	case E4M3:
		return "e4m3"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// padN is the element count rounded up so that every array is a multiple of 16 bytes.
func padN(n int) int { return (n + 127) &^ 127 }

// Layout gives the byte offsets of the arrays of a block of n elements.
type Layout struct {
	N, NP     int // elements, padded elements
	R8, R16   int // offsets (-1 if absent)
	Planes    int // offset of code plane 0; plane j at Planes + j*PlaneLen
	PlaneLen  int // bytes per plane (NP/8)
	ResPlanes int // offset of the first residue plane
	NumRes    int // number of residue planes
	StaticLen int // total bytes, a multiple of 128
}

// BlockLayout returns the layout of a block of n elements.
func BlockLayout(f Format, n int) Layout {
	s := f.spec()
	np := padN(n)
	l := Layout{N: n, NP: np, R8: -1, R16: -1, PlaneLen: np / 8, NumRes: len(s.qbits)}
	off := 0
	if s.r8 {
		l.R8 = off
		off += np
	}
	if s.r16 {
		l.R16 = off
		off += 2 * np
	}
	l.Planes = off
	off += 3 * l.PlaneLen
	l.ResPlanes = off
	off += l.NumRes * l.PlaneLen
	l.StaticLen = (off + 127) &^ 127
	return l
}

// StaticLen returns the static bytes of a block of n elements (a multiple of 128).
func StaticLen(f Format, n int) int { return BlockLayout(f, n).StaticLen }

// Window is the exponent window of one block.
type Window struct {
	Mode uint8 // ModePlain or ModeZero
	Base uint8 // first exponent field of the contiguous part
}

// Tables returns the field->code table and the code->field table of w.
// code 0 means escape.
func (w Window) tables(f Format, codeOf *[256]uint8, expOf *[8]uint8) {
	*codeOf = [256]uint8{}
	maxf := f.MaxField()
	if w.Mode == ModeZero {
		codeOf[0] = 1
		expOf[1] = 0
		for c := 2; c < 8; c++ {
			e := int(w.Base) + c - 2
			expOf[c] = uint8(e)
			if e <= maxf {
				codeOf[e] = uint8(c)
			}
		}
	} else {
		for c := 1; c < 8; c++ {
			e := int(w.Base) + c - 1
			expOf[c] = uint8(e)
			if e <= maxf {
				codeOf[e] = uint8(c)
			}
		}
	}
	expOf[0] = 0
}

// codes fills the field->code table of a bf16/fp32 (8-bit field) window.
func (w Window) codes(codeOf *[256]uint8) {
	var expOf [8]uint8
	w.tables(BF16, codeOf, &expOf)
}

// Valid reports whether w is a window the encoder can produce for f.
func (w Window) Valid(f Format) bool {
	maxf := f.MaxField()
	switch w.Mode {
	case ModePlain:
		return int(w.Base)+6 <= maxf
	case ModeZero:
		return w.Base >= 2 && int(w.Base)+5 <= maxf
	}
	return false
}

// Window rule (see docs/FORMAT.md). The magnitude bits m of a float read as a
// fixed-point number m/2^mantBits are Mitchell's approximation of
// log2|v| + bias. Their mean over the sampled elements with a non-zero,
// non-maximal exponent field estimates log2(sigma) robustly (one outlier
// moves it little), and the window start is
//
//	base = floor((sum(m) + cnt*floor(C*2^mantBits)) / (cnt*2^mantBits)) + K
//
// with (C, K) = (0.27, -4) for the 7-wide window and (0.12, -3) for the
// 6-wide window of ModeZero. For N(0, sigma^2) this is the paper's
// x_opt = log2(sigma) - 5.35 rounded to the integer with the best coverage.
// Everything is integer arithmetic so a GPU kernel reproduces it exactly.
const (
	c7, k7 = 0.27, -4
	c6, k6 = 0.12, -3
)

// SamplePos returns the index of sample k (0 <= k < SampleSize) in a block of n >= SampleSize elements.
func SamplePos(k, n int) int {
	t := uint32(n / SampleSize)
	h := uint32(k) * 2654435761
	return k*int(t) + int((h>>16)%t)
}

// fullN is the element count of a full block.
const fullN = 1 << 14

// fullPos caches the sample positions of a block of fullN elements. The
// SIMD sample kernels read 4 bytes at each, which the positions allow:
// none is the block's last element (TestSampleEveryKernel).
var fullPos = func() (p [SampleSize]int32) {
	for k := range p {
		p[k] = int32(SamplePos(k, fullN))
	}
	return
}()

// ChooseWindow picks the window of a block of n elements from a sample of them.
func ChooseWindow(f Format, src []byte, n int) Window {
	s := f.spec()
	cnt := n
	if cnt > SampleSize {
		cnt = SampleSize
	}
	if f == BF16 && n == fullN && len(src) >= 2*fullN {
		sum, nz, zc := active.sample((*[2 * fullN]byte)(src))
		return windowFromSums(f, sum, nz, zc, cnt)
	}
	magMask := uint32(1)<<(s.expShift+s.expBits) - 1
	maxf := uint32(f.MaxField())
	var sum uint64
	nz, zc := 0, 0
	for k := 0; k < cnt; k++ {
		i := k
		switch {
		case n == fullN:
			i = int(fullPos[k])
		case n > SampleSize:
			i = SamplePos(k, n)
		}
		m := load(src, i, s.size) & magMask
		switch field := m >> s.expShift; {
		case field == 0:
			zc++
		case field < maxf:
			sum += uint64(m)
			nz++
		}
	}
	return windowFromSums(f, sum, nz, zc, cnt)
}

// sampleBF16Go sums the sample of a full bf16 block: the magnitudes of
// the elements whose field is neither 0 nor 255 (nz of them), and the
// number of zero fields (zc).
func sampleBF16Go(b *[2 * fullN]byte) (sum uint64, nz, zc int) {
	for _, i := range fullPos {
		m := uint32(b[2*i]) | uint32(b[2*i+1]&0x7f)<<8
		switch field := m >> 7; {
		case field == 0:
			zc++
		case field < 255:
			sum += uint64(m)
			nz++
		}
	}
	return
}

func windowFromSums(f Format, sum uint64, nz, zc, cnt int) Window {
	s := f.spec()
	maxf := f.MaxField()
	if nz == 0 {
		return Window{Mode: ModePlain}
	}
	one := uint64(1) << s.mantBits
	start := func(c float64, k int) int {
		cf := uint64(c * float64(one))
		return int((sum+uint64(nz)*cf)/(uint64(nz)*one)) + k
	}
	if zc*16 >= cnt {
		b := start(c6, k6)
		if b > maxf-5 {
			b = maxf - 5
		}
		if b >= 2 {
			return Window{Mode: ModeZero, Base: uint8(b)}
		}
	}
	b := start(c7, k7)
	if b < 0 {
		b = 0
	}
	if b > maxf-6 {
		b = maxf - 6
	}
	return Window{Mode: ModePlain, Base: uint8(b)}
}

func load(src []byte, i, size int) uint32 {
	switch size {
	case 1:
		return uint32(src[i])
	case 2:
		return uint32(src[2*i]) | uint32(src[2*i+1])<<8
	default:
		p := src[4*i : 4*i+4]
		return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
	}
}

// CountEscapes returns how many of the n elements of src the window w
// would escape (a cheap ratio estimate; nothing is written).
func (w Window) CountEscapes(f Format, src []byte, n int) int {
	var codeOf [256]uint8
	var expOf [8]uint8
	w.tables(f, &codeOf, &expOf)
	s := f.spec()
	fmask := uint32(1)<<s.expBits - 1
	c := 0
	for i := 0; i < n; i++ {
		if codeOf[load(src, i, s.size)>>s.expShift&fmask] == 0 {
			c++
		}
	}
	return c
}
