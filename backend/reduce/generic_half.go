package reduce

import (
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Portable bfloat16 and float16 kernels: widen to float32, combine, round
// back, as torch does. bfloat16 rounds every NaN to 0x7FC0, so it needs no
// NaN handling; float16 keeps NaN signs and payloads, so it applies x86NaN.

func sumBF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		d[i] = dtype.F32ToBF16(dtype.BF16ToF32(x[i]) + dtype.BF16ToF32(y[i]))
	}
}

func mulBF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		d[i] = dtype.F32ToBF16(dtype.BF16ToF32(x[i]) * dtype.BF16ToF32(y[i]))
	}
}

func minBF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		d[i] = pickMin(x[i], y[i], dtype.BF16ToF32(x[i]), dtype.BF16ToF32(y[i]))
	}
}

func maxBF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		d[i] = pickMax(x[i], y[i], dtype.BF16ToF32(x[i]), dtype.BF16ToF32(y[i]))
	}
}

func sumF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		xf, yf := dtype.F16ToF32(x[i]), dtype.F16ToF32(y[i])
		r := xf + yf
		h, ok := f16Normal(r)
		if !ok {
			h = f16Special(r, xf, yf)
		}
		d[i] = h
	}
}

func mulF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		xf, yf := dtype.F16ToF32(x[i]), dtype.F16ToF32(y[i])
		r := xf * yf
		h, ok := f16Normal(r)
		if !ok {
			h = f16Special(r, xf, yf)
		}
		d[i] = h
	}
}

func minF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		d[i] = pickMin(x[i], y[i], dtype.F16ToF32(x[i]), dtype.F16ToF32(y[i]))
	}
}

func maxF16(dst, a, b []byte) {
	d, x, y := views[uint16](dst, a, b)
	for i := range d {
		d[i] = pickMax(x[i], y[i], dtype.F16ToF32(x[i]), dtype.F16ToF32(y[i]))
	}
}

// f16Normal is dtype.F32ToF16 restricted to results in the normal range
// (including those that round up to ±Inf); ok is false otherwise. It repeats
// that function's main case because dtype.F32ToF16 is too big to inline, and
// a call per element would halve the speed of the loops above.
// TestF16Normal checks it against dtype.F32ToF16.
func f16Normal(r float32) (h uint16, ok bool) {
	u := math.Float32bits(r)
	a := u & 0x7FFFFFFF
	if a-0x38800000 >= 0x47800000-0x38800000 {
		return 0, false
	}
	a -= 112 << 23
	return uint16(u>>16)&0x8000 | uint16((a+0xFFF+(a>>13)&1)>>13), true
}

// f16Special rounds a float16 result that f16Normal does not handle: zeros,
// subnormals, infinities and NaNs (whose bits x86NaN fixes).
func f16Special(r, x, y float32) uint16 {
	if r != r {
		r = x86NaN(x, y)
	}
	return dtype.F32ToF16(r)
}
