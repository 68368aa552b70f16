//go:build amd64 && !purego

package reduce

import (
	"github.com/klauspost/cpuid/v2"

	"github.com/zipccl/zipccl/backend/dtype"
)

func detectLevels() (runnable, preferred level) {
	c := cpuid.CPU
	switch {
	case !c.Supports(cpuid.AVX, cpuid.AVX2, cpuid.F16C):
		return levelGeneric, levelGeneric
	case !c.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL):
		return levelAVX2, levelAVX2
	case c.VendorID != cpuid.AMD && !c.Supports(cpuid.AVX512VBMI2):
		// Skylake-SP and Cascade Lake (AVX-512 without VBMI2) lower the
		// core clock while 512-bit code runs, which would slow the rest of
		// the process for a small gain on these memory-bound loops. Ice
		// Lake and later Intel cores, and AMD Zen 4 and later, do not.
		return levelAVX512, levelAVX2
	}
	return levelAVX512, levelAVX512
}

// simdKernel returns the SIMD routine for (dt, op) at curLevel and the number
// of bytes it consumes per step (it handles n bytes, n a multiple of block),
// or nil if there is none. The routines compute exactly what the portable
// kernels compute, including NaN bit patterns.
func simdKernel(dt dtype.DType, op Op) (k func(dst, a, b *byte, n int), block int) {
	if curLevel == levelGeneric {
		return nil, 0
	}
	wide := curLevel >= levelAVX512
	switch op {
	case Sum, Avg, PreMulSum:
		switch dt {
		case dtype.Float32:
			return pickLevel(wide, sumF32AVX512, sumF32AVX2)
		case dtype.Float64:
			return pickLevel(wide, sumF64AVX512, sumF64AVX2)
		case dtype.Int32:
			return pickLevel(wide, sumI32AVX512, sumI32AVX2)
		case dtype.Int64:
			return pickLevel(wide, sumI64AVX512, sumI64AVX2)
		case dtype.BFloat16:
			return pickLevel(wide, sumBF16AVX512, sumBF16AVX2)
		case dtype.Float16:
			// A 512-bit version was no faster on the AMD EPYC we measured
			// (Zen 4 executes 512-bit conversions as two halves), so the
			// AVX-512 tier uses this one too.
			return sumF16AVX2, 32
		}
	case Min:
		if dt == dtype.Float32 {
			return minF32AVX2, 32
		}
	case Max:
		if dt == dtype.Float32 {
			return maxF32AVX2, 32
		}
	}
	return nil, 0
}

func pickLevel(wide bool, avx512, avx2 func(dst, a, b *byte, n int)) (func(dst, a, b *byte, n int), int) {
	if wide {
		return avx512, 64
	}
	return avx2, 32
}

// The routines below are in *_amd64.s. Each processes n bytes (n > 0, a
// multiple of 32 for AVX2 and 64 for AVX-512) computing dst = a op b, reading
// a and b at each position before writing dst there, so dst may be a or b.

// AVX2.

//go:noescape
func sumF32AVX2(dst, a, b *byte, n int)

//go:noescape
func sumF64AVX2(dst, a, b *byte, n int)

//go:noescape
func sumI32AVX2(dst, a, b *byte, n int)

//go:noescape
func sumI64AVX2(dst, a, b *byte, n int)

//go:noescape
func minF32AVX2(dst, a, b *byte, n int)

//go:noescape
func maxF32AVX2(dst, a, b *byte, n int)

//go:noescape
func sumBF16AVX2(dst, a, b *byte, n int)

//go:noescape
func sumF16AVX2(dst, a, b *byte, n int)

// AVX-512.

//go:noescape
func sumF32AVX512(dst, a, b *byte, n int)

//go:noescape
func sumF64AVX512(dst, a, b *byte, n int)

//go:noescape
func sumI32AVX512(dst, a, b *byte, n int)

//go:noescape
func sumI64AVX512(dst, a, b *byte, n int)

//go:noescape
func sumBF16AVX512(dst, a, b *byte, n int)
