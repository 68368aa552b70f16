//go:build amd64 && !purego

package reduce

import (
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// The AVX2 + F16C float32-accumulation routines (accum_amd64.s) cover
// bfloat16 and float16 SUM and PRODUCT, at levelAVX2 and above (there is no
// 512-bit version: the loops are memory-bound). Each handles n elements, a
// positive multiple of 16; the portable code does the rest.

//go:noescape
func accInitBF16AddAVX2(acc *float32, a, b *byte, n int)

//go:noescape
func accInitBF16MulAVX2(acc *float32, a, b *byte, n int)

//go:noescape
func accInitF16AddAVX2(acc *float32, a, b *byte, n int)

//go:noescape
func accInitF16MulAVX2(acc *float32, a, b *byte, n int)

//go:noescape
func accumBF16AddAVX2(acc *float32, src *byte, n int)

//go:noescape
func accumBF16MulAVX2(acc *float32, src *byte, n int)

//go:noescape
func accumF16AddAVX2(acc *float32, src *byte, n int)

//go:noescape
func accumF16MulAVX2(acc *float32, src *byte, n int)

//go:noescape
func accFinishBF16AddAVX2(dst *byte, acc *float32, src *byte, n int)

//go:noescape
func accFinishBF16MulAVX2(dst *byte, acc *float32, src *byte, n int)

//go:noescape
func accFinishF16AddAVX2(dst *byte, acc *float32, src *byte, n int)

//go:noescape
func accFinishF16MulAVX2(dst *byte, acc *float32, src *byte, n int)

//go:noescape
func narrowBF16AVX2(dst *byte, acc *float32, n int)

//go:noescape
func narrowF16AVX2(dst *byte, acc *float32, n int)

//go:noescape
func widenBF16AVX2(acc *float32, src *byte, n int)

//go:noescape
func widenF16AVX2(acc *float32, src *byte, n int)

// widenSIMD widens the leading elements it can (a multiple of 16) and
// returns how many.
func widenSIMD(dt dtype.DType, acc []float32, src []byte) int {
	n := len(acc) &^ 15
	if curLevel < levelAVX2 || n == 0 {
		return 0
	}
	switch dt {
	case dtype.BFloat16:
		widenBF16AVX2(unsafe.SliceData(acc), unsafe.SliceData(src), n)
	case dtype.Float16:
		widenF16AVX2(unsafe.SliceData(acc), unsafe.SliceData(src), n)
	default:
		return 0
	}
	return n
}

// narrowSIMD narrows the leading elements it can (a multiple of 16) and
// returns how many.
func narrowSIMD(dt dtype.DType, dst []byte, acc []float32) int {
	n := len(acc) &^ 15
	if curLevel < levelAVX2 || n == 0 {
		return 0
	}
	switch dt {
	case dtype.BFloat16:
		narrowBF16AVX2(unsafe.SliceData(dst), unsafe.SliceData(acc), n)
	case dtype.Float16:
		narrowF16AVX2(unsafe.SliceData(dst), unsafe.SliceData(acc), n)
	default:
		return 0
	}
	return n
}

// accSIMD returns the number of leading elements a SIMD routine should
// handle for (dt, op), and which routine set (0 bf16 add, 1 bf16 mul, 2 f16
// add, 3 f16 mul), or -1.
func accSIMD(dt dtype.DType, op Op, n int) (int, int) {
	if curLevel < levelAVX2 || n < 16 {
		return 0, -1
	}
	k := 0
	switch dt {
	case dtype.BFloat16:
	case dtype.Float16:
		k = 2
	default:
		return 0, -1
	}
	if isMul(op) {
		k++
	}
	return n &^ 15, k
}

func accumInitSIMD(dt dtype.DType, op Op, acc []float32, a, b []byte) int {
	n, k := accSIMD(dt, op, len(acc))
	if k < 0 {
		return 0
	}
	f := [...]func(*float32, *byte, *byte, int){accInitBF16AddAVX2, accInitBF16MulAVX2, accInitF16AddAVX2, accInitF16MulAVX2}[k]
	f(unsafe.SliceData(acc), unsafe.SliceData(a), unsafe.SliceData(b), n)
	return n
}

func accumSIMD(dt dtype.DType, op Op, acc []float32, src []byte) int {
	n, k := accSIMD(dt, op, len(acc))
	if k < 0 {
		return 0
	}
	f := [...]func(*float32, *byte, int){accumBF16AddAVX2, accumBF16MulAVX2, accumF16AddAVX2, accumF16MulAVX2}[k]
	f(unsafe.SliceData(acc), unsafe.SliceData(src), n)
	return n
}

func accumFinishSIMD(dt dtype.DType, op Op, dst []byte, acc []float32, src []byte) int {
	n, k := accSIMD(dt, op, len(acc))
	if k < 0 {
		return 0
	}
	f := [...]func(*byte, *float32, *byte, int){accFinishBF16AddAVX2, accFinishBF16MulAVX2, accFinishF16AddAVX2, accFinishF16MulAVX2}[k]
	f(unsafe.SliceData(dst), unsafe.SliceData(acc), unsafe.SliceData(src), n)
	return n
}
