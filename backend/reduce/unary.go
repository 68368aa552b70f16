package reduce

import "github.com/zipccl/zipccl/backend/dtype"

// A unaryOp is Scale's multiplication by f or Average's division by n.
type unaryOp struct {
	div bool
	f   float64 // factor, for Scale
	n   int     // divisor, for Average
}

// applyUnary runs u in place on an aligned, host-order buffer.
func applyUnary(dt dtype.DType, buf []byte, u unaryOp) {
	if dt == dtype.Float64 {
		if u.div {
			divF64(view[float64](buf), float64(u.n))
		} else {
			mulScalarF64(view[float64](buf), u.f)
		}
		return
	}
	if dt.IsFloat() {
		// torch computes reduced-precision and float32 tensor-scalar ops in
		// float32 with the scalar rounded to float32 (at::opmath_type).
		s := float32(u.f)
		if u.div {
			s = float32(u.n)
		}
		reducedUnary(dt, buf, s, u.div)
		return
	}
	n := int64(u.n)
	switch dt {
	case dtype.Int8:
		divInt(view[int8](buf), n)
	case dtype.UInt8:
		divInt(view[uint8](buf), n)
	case dtype.Int16:
		divInt(view[int16](buf), n)
	case dtype.Int32:
		divInt(view[int32](buf), n)
	case dtype.Int64:
		divInt(view[int64](buf), n)
	default:
		panic("zipccl/reduce: no unary kernel for " + dt.String()) // unreachable
	}
}

func mulScalarF64(d []float64, f float64) {
	for i := range d {
		d[i] *= f
	}
}

func divF64(d []float64, n float64) {
	for i := range d {
		d[i] /= n
	}
}

// divInt divides truncating toward zero, like C and torch's "trunc" mode.
// n ≥ 1, so the quotient always fits in T.
func divInt[T integer](d []T, n int64) {
	for i := range d {
		d[i] = T(int64(d[i]) / n)
	}
}

// reducedUnary multiplies (div false) or divides every element of a float32,
// bfloat16, float16 or float8 buffer by s in float32 and rounds back.
func reducedUnary(dt dtype.DType, buf []byte, s float32, div bool) {
	switch dt {
	case dtype.Float32:
		d := view[float32](buf)
		if div {
			for i := range d {
				d[i] /= s
			}
		} else {
			for i := range d {
				d[i] *= s
			}
		}
	case dtype.BFloat16:
		d := view[uint16](buf)
		for i, x := range d {
			d[i] = dtype.F32ToBF16(apply(dtype.BF16ToF32(x), s, div))
		}
	case dtype.Float16:
		d := view[uint16](buf)
		for i, x := range d {
			xf := dtype.F16ToF32(x)
			r := apply(xf, s, div)
			h, ok := f16Normal(r)
			if !ok {
				h = f16Special(r, xf, s)
			}
			d[i] = h
		}
	case dtype.Float8E4M3FN:
		d := view[uint8](buf)
		for i, x := range d {
			xf := dtype.E4M3FNToF32(x)
			d[i] = dtype.F32ToE4M3FN(fixNaN(apply(xf, s, div), xf, s))
		}
	case dtype.Float8E5M2:
		d := view[uint8](buf)
		for i, x := range d {
			xf := dtype.E5M2ToF32(x)
			d[i] = dtype.F32ToE5M2(fixNaN(apply(xf, s, div), xf, s))
		}
	}
}

// apply returns x/s or x*s. The branch is loop-invariant and predictable;
// Scale and Average are single passes, far off the hot path of Reduce.
func apply(x, s float32, div bool) float32 {
	if div {
		return x / s
	}
	return x * s
}
