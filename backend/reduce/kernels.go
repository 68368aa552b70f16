package reduce

import (
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
)

// A kernel computes dst[i] = a[i] op b[i] over buffers that are aligned for
// the element type, of equal length, and where dst is a, b or disjoint.
type kernel func(dst, a, b []byte)

// combine runs op on buffers that passed reduce3's checks: a SIMD routine does
// the whole vectors if there is one, the generic kernel the rest.
func combine(dt dtype.DType, op Op, dst, a, b []byte) {
	done := 0
	if k, block := simdKernel(dt, op); k != nil {
		done = len(dst) &^ (block - 1)
		if done > 0 {
			k(&dst[0], &a[0], &b[0], done)
		}
		if done == len(dst) {
			return
		}
	}
	genericKernel(dt, op)(dst[done:], a[done:], b[done:])
}

// genericKernel returns the portable kernel for a supported (dt, op).
func genericKernel(dt dtype.DType, op Op) kernel {
	if int(dt) < len(genericKernels) && op < numOps {
		if k := genericKernels[dt][op]; k != nil {
			return k
		}
	}
	panic("zipccl/reduce: no kernel for " + op.String() + " on " + dt.String()) // unreachable after Check
}

// genericKernels is indexed by dtype and op. (A table rather than a switch
// returning generic instantiations, which would allocate a closure per call.)
var genericKernels = func() (t [dtype.Float8E5M2 + 1][numOps]kernel) {
	floats := func(dt dtype.DType, sum, mul, min, max kernel) {
		t[dt] = [numOps]kernel{Sum: sum, Avg: sum, PreMulSum: sum, Product: mul, Min: min, Max: max}
	}
	floats(dtype.Float32, sumF32, mulF32, minF32, maxF32)
	floats(dtype.Float64, sumF64, mulF64, minF64, maxF64)
	floats(dtype.BFloat16, sumBF16, mulBF16, minBF16, maxBF16)
	floats(dtype.Float16, sumF16, mulF16, minF16, maxF16)
	floats(dtype.Float8E4M3FN, sumE4M3FN, mulE4M3FN, minE4M3FN, maxE4M3FN)
	floats(dtype.Float8E5M2, sumE5M2, mulE5M2, minE5M2, maxE5M2)
	t[dtype.Int8] = intKernels[int8]()
	t[dtype.UInt8] = intKernels[uint8]()
	t[dtype.Int16] = intKernels[int16]()
	t[dtype.Int32] = intKernels[int32]()
	t[dtype.Int64] = intKernels[int64]()
	t[dtype.Bool] = [numOps]kernel{Sum: orBool, Max: orBool, BOr: orBool,
		Product: andBool, Min: andBool, BAnd: andBool, BXor: xorBool}
	return t
}()

func intKernels[T integer]() [numOps]kernel {
	return [numOps]kernel{Sum: sumInt[T], Avg: sumInt[T], Product: mulInt[T], Min: minInt[T],
		Max: maxInt[T], BAnd: andInt[T], BOr: orInt[T], BXor: xorInt[T]}
}

// views returns typed views of three equal-length buffers, resliced so the
// compiler can drop bounds checks in the loops that use them.
func views[T any](dst, a, b []byte) (d, x, y []T) {
	d = view[T](dst)
	return d, view[T](a)[:len(d)], view[T](b)[:len(d)]
}

// x86NaN returns the NaN that an x86 SSE/AVX arithmetic instruction yields
// for x op y when the result is NaN: x if it is NaN, else y, made quiet; for
// an invalid operation on non-NaN operands (∞-∞, 0×∞) the default NaN, which
// is negative on x86. The reduced-precision kernels apply it explicitly so
// that the NaN they round (and so its sign and, for float16, payload) is the
// same on every architecture and for every compiler's choice of operand
// order, and equals what torch's x86 kernels and our SIMD routines produce.
func x86NaN(x, y float32) float32 {
	switch {
	case x != x:
		return math.Float32frombits(math.Float32bits(x) | 0x00400000)
	case y != y:
		return math.Float32frombits(math.Float32bits(y) | 0x00400000)
	}
	return math.Float32frombits(0xFFC00000)
}

// pickMin returns the raw encoding x or y of the smaller value, given the
// decoded values xf and yf: x if xf is NaN, else y if yf is NaN, and for
// equal values x|y, so that min(-0, +0) = -0 in either order (equal values
// other than zeros have equal encodings). The later assignments take
// priority; written as plain conditional assignments the compiler emits
// conditional moves, which matters on random data.
func pickMin[T uint8 | uint16 | uint32 | uint64, F float32 | float64](x, y T, xf, yf F) T {
	r := x | y
	if yf < xf {
		r = y
	}
	if xf < yf {
		r = x
	}
	if yf != yf {
		r = y
	}
	if xf != xf {
		r = x
	}
	return r
}

// pickMax is pickMin for the maximum; equal values give x&y, so that
// max(-0, +0) = +0.
func pickMax[T uint8 | uint16 | uint32 | uint64, F float32 | float64](x, y T, xf, yf F) T {
	r := x & y
	if yf > xf {
		r = y
	}
	if xf > yf {
		r = x
	}
	if yf != yf {
		r = y
	}
	if xf != xf {
		r = x
	}
	return r
}
