//go:build amd64 && !purego

package quant

import (
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// The fp8 routines of fp8_amd64.s, each on one block of n = B elements
// (a power of two from 32 to 1024) unless it says otherwise.

//go:noescape
func fp8PrepBF16AVX2(u, t *float32, src *byte, n int) float32

//go:noescape
func fp8PrepF16AVX2(u, t *float32, src *byte, n int) float32

//go:noescape
func fp8PrepF32AVX2(u, t *float32, src *byte, n int) float32

//go:noescape
func fwhtAVX2(u *float32, n int)

//go:noescape
func e4m3AVX2(dst *byte, src *float32, n int, inv float32)

//go:noescape
func e4m3ValuesAVX2(u *float32, codes *byte, n int)

//go:noescape
func fp8NarrowBF16AVX2(dst *byte, u *float32, n int, k float32)

//go:noescape
func fp8NarrowF16AVX2(dst *byte, u *float32, n int, k float32)

//go:noescape
func fp8ScaleAVX2(dst *float32, u *float32, n int, k float32, add bool)

// fp8EncodeSIMD is the first half of fp8Scratch.encode on the AVX2 path:
// it widens raw (up to B elements of dt) into u, zeros to B, and returns
// the tree sum of the squares and max|Hu|'s bits (NaN and infinity above
// all finite magnitudes), u left holding Hu. t is scratch.
func fp8EncodeSIMD(dt dtype.DType, u, t []float32, raw []byte) (sum float32, mbits uint32) {
	b := len(u)
	p, src := unsafe.SliceData(u), unsafe.SliceData(raw)
	if n := len(raw) / dt.Size(); n < b { // the short last block: widen, then as float32 in place
		widen(dt, u[:n], raw)
		clear(u[n:])
		dt, src = dtype.Float32, (*byte)(unsafe.Pointer(p))
	}
	switch dt {
	case dtype.BFloat16:
		sum = fp8PrepBF16AVX2(p, unsafe.SliceData(t), src, b)
	case dtype.Float16:
		sum = fp8PrepF16AVX2(p, unsafe.SliceData(t), src, b)
	default:
		sum = fp8PrepF32AVX2(p, unsafe.SliceData(t), src, b)
	}
	fwhtAVX2(p, b)
	return sum, absMax32AVX2((*byte)(unsafe.Pointer(p)), b)
}

// e4m3SIMD sets codes[i] = dtype.F32ToE4M3FN(u[i] * inv) for the leading
// elements it can (a multiple of 32) and returns how many.
func e4m3SIMD(codes []byte, u []float32, inv float32) int {
	n := len(u) &^ 31
	if n > 0 {
		e4m3AVX2(unsafe.SliceData(codes[:n]), unsafe.SliceData(u), n, inv)
	}
	return n
}

// fp8DecodeSIMD sets u (B elements) to H(the values of codes).
func fp8DecodeSIMD(u []float32, codes []byte) {
	p := unsafe.SliceData(u)
	e4m3ValuesAVX2(p, unsafe.SliceData(codes[:len(u)]), len(u))
	fwhtAVX2(p, len(u))
}

// fp8NarrowSIMD sets the leading elements it can of dst (of dt, a multiple
// of 16 of them) to u[i] * k rounded to dt, and returns how many.
func fp8NarrowSIMD(dt dtype.DType, dst []byte, u []float32, k float32) int {
	n := len(dst) / dt.Size() &^ 15
	if n == 0 {
		return 0
	}
	p, q := unsafe.SliceData(dst), unsafe.SliceData(u[:n])
	switch dt {
	case dtype.BFloat16:
		fp8NarrowBF16AVX2(p, q, n, k)
	case dtype.Float16:
		fp8NarrowF16AVX2(p, q, n, k)
	default:
		fp8ScaleAVX2((*float32)(unsafe.Pointer(p)), q, n, k, false)
	}
	return n
}

// fp8ScaleSIMD sets (or with add, adds to) the leading elements it can of
// dst (a multiple of 16) u[i] * k, and returns how many.
func fp8ScaleSIMD(dst, u []float32, k float32, add bool) int {
	n := len(dst) &^ 15
	if n > 0 {
		fp8ScaleAVX2(unsafe.SliceData(dst), unsafe.SliceData(u[:n]), n, k, add)
	}
	return n
}
