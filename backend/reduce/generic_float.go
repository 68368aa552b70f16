package reduce

import "math"

// Portable float32 and float64 kernels. They use the hardware's IEEE
// arithmetic directly, so NaN payloads follow the host (on amd64 the SIMD
// routines use the same operand order and produce the same bits).

func sumF32(dst, a, b []byte) {
	d, x, y := views[float32](dst, a, b)
	for i := range d {
		d[i] = x[i] + y[i]
	}
}

func mulF32(dst, a, b []byte) {
	d, x, y := views[float32](dst, a, b)
	for i := range d {
		d[i] = x[i] * y[i]
	}
}

// The min/max kernels work on bit patterns so that a NaN operand is returned
// exactly as it is (float moves would be fine on amd64 and arm64, but this
// makes the intent explicit).

func minF32(dst, a, b []byte) {
	d, x, y := views[uint32](dst, a, b)
	for i := range d {
		d[i] = pickMin(x[i], y[i], math.Float32frombits(x[i]), math.Float32frombits(y[i]))
	}
}

func maxF32(dst, a, b []byte) {
	d, x, y := views[uint32](dst, a, b)
	for i := range d {
		d[i] = pickMax(x[i], y[i], math.Float32frombits(x[i]), math.Float32frombits(y[i]))
	}
}

func sumF64(dst, a, b []byte) {
	d, x, y := views[float64](dst, a, b)
	for i := range d {
		d[i] = x[i] + y[i]
	}
}

func mulF64(dst, a, b []byte) {
	d, x, y := views[float64](dst, a, b)
	for i := range d {
		d[i] = x[i] * y[i]
	}
}

func minF64(dst, a, b []byte) {
	d, x, y := views[uint64](dst, a, b)
	for i := range d {
		d[i] = pickMin(x[i], y[i], math.Float64frombits(x[i]), math.Float64frombits(y[i]))
	}
}

func maxF64(dst, a, b []byte) {
	d, x, y := views[uint64](dst, a, b)
	for i := range d {
		d[i] = pickMax(x[i], y[i], math.Float64frombits(x[i]), math.Float64frombits(y[i]))
	}
}
