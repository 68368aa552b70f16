//go:build amd64 && !purego

package quant

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/zipccl/zipccl/backend/dtype"
)

//go:noescape
func absMax16AVX2(p *byte, n int) uint16

//go:noescape
func absMax32AVX2(p *byte, n int) uint32

//go:noescape
func q8BF16AVX2(codes *byte, src *byte, n int, inv float32)

//go:noescape
func q4BF16AVX2(codes *byte, src *byte, n int, inv float32)

//go:noescape
func q8F16AVX2(codes *byte, src *byte, n int, inv float32)

//go:noescape
func q4F16AVX2(codes *byte, src *byte, n int, inv float32)

//go:noescape
func q8F32AVX2(codes *byte, src *byte, n int, inv float32)

//go:noescape
func q4F32AVX2(codes *byte, src *byte, n int, inv float32)

//go:noescape
func acc8AVX2(acc *float32, codes *byte, n int, s float32, first bool)

//go:noescape
func acc4AVX2(acc *float32, codes *byte, n int, s float32, first bool)

// useAVX2 says the AVX2 (+F16C) routines run (a variable: the tests run
// the portable code too).
var useAVX2 = cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.F16C)

// absMax16 is the largest 16-bit little-endian word of src with its top
// bit cleared.
func absMax16(src []byte) uint16 {
	n := len(src) / 2
	if !useAVX2 || n < 16 {
		return absMax16Go(src)
	}
	k := n &^ 15
	m := absMax16AVX2(unsafe.SliceData(src), k)
	return max(m, absMax16Go(src[2*k:]))
}

// absMax32 is the largest 32-bit little-endian word of src with its top
// bit cleared.
func absMax32(src []byte) uint32 {
	n := len(src) / 4
	if !useAVX2 || n < 16 {
		return absMax32Go(src)
	}
	k := n &^ 15
	m := absMax32AVX2(unsafe.SliceData(src), k)
	return max(m, absMax32Go(src[4*k:]))
}

// quantSIMD codes the leading elements of src it can (a multiple of 32)
// into out (mode's codes) and returns how many.
func quantSIMD(dt dtype.DType, mode Mode, out, src []byte, inv float32) int {
	k := len(src) / dt.Size() &^ 31
	if !useAVX2 || k == 0 {
		return 0
	}
	var f func(*byte, *byte, int, float32)
	switch {
	case dt == dtype.BFloat16 && mode == Int8:
		f = q8BF16AVX2
	case dt == dtype.BFloat16:
		f = q4BF16AVX2
	case dt == dtype.Float16 && mode == Int8:
		f = q8F16AVX2
	case dt == dtype.Float16:
		f = q4F16AVX2
	case mode == Int8:
		f = q8F32AVX2
	default:
		f = q4F32AVX2
	}
	f(unsafe.SliceData(out), unsafe.SliceData(src), k, inv)
	return k
}

// accSIMD adds (or with first sets) the leading codes' values it can (a
// multiple of 32 elements) into a and returns how many.
func accSIMD(mode Mode, a []float32, codes []byte, s float32, first bool) int {
	k := len(a) &^ 31
	if !useAVX2 || k == 0 {
		return 0
	}
	if mode == Int8 {
		acc8AVX2(unsafe.SliceData(a), unsafe.SliceData(codes), k, s, first)
	} else {
		acc4AVX2(unsafe.SliceData(a), unsafe.SliceData(codes), k, s, first)
	}
	return k
}
