package reduce

import "github.com/zipccl/zipccl/backend/dtype"

// Portable float8 kernels: widen to float32, combine, round back, as torch
// computes (a.float() op b.float()).to(float8) (torch has no CPU float8
// arithmetic). The rounding keeps the sign of NaN, so x86NaN fixes it.

// fixNaN returns r, or the x86 NaN for x op y if r is NaN.
func fixNaN(r, x, y float32) float32 {
	if r != r {
		return x86NaN(x, y)
	}
	return r
}

func sumE4M3FN(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		xf, yf := dtype.E4M3FNToF32(x[i]), dtype.E4M3FNToF32(y[i])
		d[i] = dtype.F32ToE4M3FN(fixNaN(xf+yf, xf, yf))
	}
}

func mulE4M3FN(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		xf, yf := dtype.E4M3FNToF32(x[i]), dtype.E4M3FNToF32(y[i])
		d[i] = dtype.F32ToE4M3FN(fixNaN(xf*yf, xf, yf))
	}
}

func minE4M3FN(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		d[i] = pickMin(x[i], y[i], dtype.E4M3FNToF32(x[i]), dtype.E4M3FNToF32(y[i]))
	}
}

func maxE4M3FN(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		d[i] = pickMax(x[i], y[i], dtype.E4M3FNToF32(x[i]), dtype.E4M3FNToF32(y[i]))
	}
}

func sumE5M2(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		xf, yf := dtype.E5M2ToF32(x[i]), dtype.E5M2ToF32(y[i])
		d[i] = dtype.F32ToE5M2(fixNaN(xf+yf, xf, yf))
	}
}

func mulE5M2(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		xf, yf := dtype.E5M2ToF32(x[i]), dtype.E5M2ToF32(y[i])
		d[i] = dtype.F32ToE5M2(fixNaN(xf*yf, xf, yf))
	}
}

func minE5M2(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		d[i] = pickMin(x[i], y[i], dtype.E5M2ToF32(x[i]), dtype.E5M2ToF32(y[i]))
	}
}

func maxE5M2(dst, a, b []byte) {
	d, x, y := views[uint8](dst, a, b)
	for i := range d {
		d[i] = pickMax(x[i], y[i], dtype.E5M2ToF32(x[i]), dtype.E5M2ToF32(y[i]))
	}
}
