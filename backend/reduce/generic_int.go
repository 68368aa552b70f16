package reduce

// Portable integer and bool kernels. Go's integer arithmetic wraps, which is
// the two's-complement behaviour torch (and NCCL) produce.

import "golang.org/x/exp/constraints"

type integer = constraints.Integer

func sumInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = x[i] + y[i]
	}
}

func mulInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = x[i] * y[i]
	}
}

func minInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = min(x[i], y[i])
	}
}

func maxInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = max(x[i], y[i])
	}
}

func andInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = x[i] & y[i]
	}
}

func orInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = x[i] | y[i]
	}
}

func xorInt[T integer](dst, a, b []byte) {
	d, x, y := views[T](dst, a, b)
	for i := range d {
		d[i] = x[i] ^ y[i]
	}
}

// Bool kernels treat any nonzero byte as true and always write 0 or 1.

func b2u(c bool) uint8 {
	if c {
		return 1
	}
	return 0
}

func orBool(dst, a, b []byte) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = b2u(a[i]|b[i] != 0)
	}
}

func andBool(dst, a, b []byte) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = b2u(a[i] != 0) & b2u(b[i] != 0)
	}
}

func xorBool(dst, a, b []byte) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = b2u(a[i] != 0) ^ b2u(b[i] != 0)
	}
}
