package reduce

import (
	"math"
	"runtime"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/elems"
)

// This file holds a deliberately plain reference: one element at a time, on
// uint64 bit patterns, with the semantics spelled out case by case.

var allDTypes = []dtype.DType{
	dtype.Float32, dtype.Float64, dtype.BFloat16, dtype.Float16,
	dtype.Int8, dtype.UInt8, dtype.Int16, dtype.Int32, dtype.Int64, dtype.Bool,
	dtype.Float8E4M3FN, dtype.Float8E5M2,
}

var allOps = []Op{Sum, Avg, Product, Min, Max, BAnd, BOr, BXor, PreMulSum}

// load and store access one element (backend/internal/elems).
var load, store = elems.Load, elems.Store

// widen and narrow convert between a float dtype's encoding and float64
// (exact for every format but float64 itself, which passes through).
func widen(dt dtype.DType, x uint64) float64 {
	switch dt {
	case dtype.Float32:
		return float64(math.Float32frombits(uint32(x)))
	case dtype.Float64:
		return math.Float64frombits(x)
	case dtype.BFloat16:
		return float64(dtype.BF16ToF32(uint16(x)))
	case dtype.Float16:
		return float64(dtype.F16ToF32(uint16(x)))
	case dtype.Float8E4M3FN:
		return float64(dtype.E4M3FNToF32(uint8(x)))
	case dtype.Float8E5M2:
		return float64(dtype.E5M2ToF32(uint8(x)))
	}
	panic("not a float")
}

func narrow32(dt dtype.DType, f float32) uint64 {
	switch dt {
	case dtype.Float32:
		return uint64(math.Float32bits(f))
	case dtype.BFloat16:
		return uint64(dtype.F32ToBF16(f))
	case dtype.Float16:
		return uint64(dtype.F32ToF16(f))
	case dtype.Float8E4M3FN:
		return uint64(dtype.F32ToE4M3FN(f))
	case dtype.Float8E5M2:
		return uint64(dtype.F32ToE5M2(f))
	}
	panic("not a float32-computed type")
}

// refNaN32 is the x86 SSE rule for the NaN produced by x op y.
func refNaN32(x, y float32) float32 {
	if math.IsNaN(float64(x)) {
		return math.Float32frombits(math.Float32bits(x) | 1<<22)
	}
	if math.IsNaN(float64(y)) {
		return math.Float32frombits(math.Float32bits(y) | 1<<22)
	}
	return math.Float32frombits(0xFFC00000)
}

func refNaN64(x, y float64) float64 {
	if math.IsNaN(x) {
		return math.Float64frombits(math.Float64bits(x) | 1<<51)
	}
	if math.IsNaN(y) {
		return math.Float64frombits(math.Float64bits(y) | 1<<51)
	}
	return math.Float64frombits(0xFFF8000000000000)
}

// float32 math that cannot be fused or reordered: each result is stored.
//
//go:noinline
func add32(x, y float32) float32 { return x + y }

//go:noinline
func mul32(x, y float32) float32 { return x * y }

// refCombine is x op y for one element of dt.
func refCombine(dt dtype.DType, op Op, x, y uint64) uint64 {
	if op == Avg || op == PreMulSum {
		op = Sum
	}
	switch {
	case dt == dtype.Bool:
		bx, by := x != 0, y != 0
		var r bool
		switch op {
		case Sum, Max, BOr:
			r = bx || by
		case Product, Min, BAnd:
			r = bx && by
		case BXor:
			r = bx != by
		}
		if r {
			return 1
		}
		return 0
	case !dt.IsFloat():
		return refInt(dt, op, x, y)
	case op == Min || op == Max:
		return refMinMax(dt, op, x, y)
	case dt == dtype.Float64:
		xf, yf := math.Float64frombits(x), math.Float64frombits(y)
		r := xf + yf
		if op == Product {
			r = xf * yf
		}
		if math.IsNaN(r) {
			r = refNaN64(xf, yf)
		}
		return math.Float64bits(r)
	}
	xf, yf := float32(widen(dt, x)), float32(widen(dt, y))
	r := add32(xf, yf)
	if op == Product {
		r = mul32(xf, yf)
	}
	if math.IsNaN(float64(r)) {
		r = refNaN32(xf, yf)
	}
	return narrow32(dt, r)
}

func refMinMax(dt dtype.DType, op Op, x, y uint64) uint64 {
	xf, yf := widen(dt, x), widen(dt, y)
	switch {
	case math.IsNaN(xf):
		return x
	case math.IsNaN(yf):
		return y
	case xf == yf && xf == 0: // ±0: the minimum is -0 if either is, the maximum +0 if either is
		neg := math.Signbit(xf) || math.Signbit(yf)
		if op == Max {
			neg = math.Signbit(xf) && math.Signbit(yf)
		}
		if neg == math.Signbit(xf) {
			return x
		}
		return y
	case (op == Min) == (xf <= yf):
		return x
	}
	return y
}

func refInt(dt dtype.DType, op Op, x, y uint64) uint64 {
	bitsz := 8 * dt.Size()
	sx := int64(x<<(64-bitsz)) >> (64 - bitsz) // sign-extended
	sy := int64(y<<(64-bitsz)) >> (64 - bitsz)
	if dt == dtype.UInt8 {
		sx, sy = int64(x), int64(y)
	}
	var r int64
	switch op {
	case Sum:
		r = sx + sy
	case Product:
		r = sx * sy
	case Min:
		r = min(sx, sy)
	case Max:
		r = max(sx, sy)
	case BAnd:
		r = sx & sy
	case BOr:
		r = sx | sy
	case BXor:
		r = sx ^ sy
	}
	return uint64(r) & (uint64(1)<<bitsz - 1) // low bitsz bits (all for 64)
}

// refUnary is Scale (div false) or Average (div true) for one element.
func refUnary(dt dtype.DType, x uint64, div bool, f float64, n int) uint64 {
	switch {
	case dt == dtype.Float64:
		xf := math.Float64frombits(x)
		if div {
			return math.Float64bits(xf / float64(n))
		}
		return math.Float64bits(xf * f)
	case dt.IsFloat():
		xf := float32(widen(dt, x))
		s := float32(f)
		if div {
			s = float32(n)
		}
		var r float32
		if div {
			r = div32(xf, s)
		} else {
			r = mul32(xf, s)
		}
		if math.IsNaN(float64(r)) {
			r = refNaN32(xf, s)
		}
		return narrow32(dt, r)
	}
	bitsz := 8 * dt.Size()
	sx := int64(x<<(64-bitsz)) >> (64 - bitsz)
	if dt == dtype.UInt8 {
		sx = int64(x)
	}
	q := sx / int64(n) // Go truncates toward zero
	return uint64(q) & (uint64(1)<<bitsz - 1)
}

//go:noinline
func div32(x, y float32) float32 { return x / y }

// nanLoose reports whether results that are both NaN count as equal for dt:
// float32/float64 NaN bits come from the host FPU, which follows the x86 rule
// only on amd64.
func nanLoose(dt dtype.DType) bool {
	return runtime.GOARCH != "amd64" && (dt == dtype.Float32 || dt == dtype.Float64)
}

func isNaNBits(dt dtype.DType, v uint64) bool {
	return dt.IsFloat() && math.IsNaN(widen(dt, v))
}
