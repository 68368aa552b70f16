package reduce

import (
	"fmt"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Reduce sets dst[i] = dst[i] op src[i] for every element. dst and src are
// little-endian arrays of dt of equal length; they may be the same slice but
// must not otherwise overlap. For Avg and PreMulSum the combine is addition;
// the caller applies Average or Scale.
//
// Reduce panics if Check(dt, op) fails, if the lengths differ or are not a
// multiple of dt.Size(), or on partial overlap: all are programming errors.
func Reduce(dt dtype.DType, op Op, dst, src []byte) {
	reduce3(dt, op, dst, dst, src)
}

// Reduce3 sets dst[i] = a[i] op b[i] for every element. dst may be exactly a
// or b (the same start and length) but must not otherwise overlap them; a
// and b may overlap freely. Otherwise it behaves like Reduce.
func Reduce3(dt dtype.DType, op Op, dst, a, b []byte) {
	reduce3(dt, op, dst, a, b)
}

func reduce3(dt dtype.DType, op Op, dst, a, b []byte) {
	if err := Check(dt, op); err != nil {
		panic(err)
	}
	size := dt.Size()
	if len(a) != len(dst) || len(b) != len(dst) || len(dst)%size != 0 {
		panic(fmt.Sprintf("zipccl/reduce: buffer lengths %d, %d, %d are not equal multiples of %d-byte %s elements",
			len(dst), len(a), len(b), size, dt))
	}
	if partialOverlap(dst, a) || partialOverlap(dst, b) {
		panic("zipccl/reduce: destination partially overlaps an operand")
	}
	if len(dst) == 0 {
		return
	}
	if !direct(size, dst, a, b) {
		staged3(dt, op, dst, a, b)
		return
	}
	combine(dt, op, dst, a, b)
}

// Scale sets buf[i] = buf[i] × f, rounded to dt; this is PREMUL_SUM's local
// pre-multiplication. It matches torch's t.mul_(f): float64 multiplies in
// float64; every other type multiplies in float32 by float32(f) and rounds
// the product to dt. Scale panics if dt is not a floating-point type or
// len(buf) is not a multiple of dt.Size().
func Scale(dt dtype.DType, buf []byte, f float64) {
	if !dt.IsFloat() {
		panic(&UnsupportedError{Op: PreMulSum, DType: dt})
	}
	unary(dt, buf, unaryOp{f: f})
}

// Average finishes an AVG by dividing every element by n, the number of
// contributions, as torch's t.div_(n) (floats) or
// t.div_(n, rounding_mode="trunc") (integers) does: float64 divides in
// float64; other floating-point types divide in float32 by float32(n) and
// round the quotient to dt; integers divide truncating toward zero. Average
// panics if dt is Bool or invalid, if n < 1, or if len(buf) is not a
// multiple of dt.Size().
func Average(dt dtype.DType, buf []byte, n int) {
	if !supported(dt, Avg) {
		panic(&UnsupportedError{Op: Avg, DType: dt})
	}
	if n < 1 {
		panic(fmt.Sprintf("zipccl/reduce: Average by %d", n))
	}
	unary(dt, buf, unaryOp{div: true, n: n})
}

func unary(dt dtype.DType, buf []byte, u unaryOp) {
	if len(buf)%dt.Size() != 0 {
		panic(fmt.Sprintf("zipccl/reduce: buffer length %d is not a multiple of %d-byte %s elements",
			len(buf), dt.Size(), dt))
	}
	if len(buf) == 0 {
		return
	}
	if !direct(dt.Size(), buf) {
		staged1(dt, buf, u)
		return
	}
	applyUnary(dt, buf, u)
}

// partialOverlap reports whether x and y share memory without being the
// same slice. Exact aliasing is safe because every kernel reads element i of
// both operands before writing element i.
func partialOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	px := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	py := uintptr(unsafe.Pointer(unsafe.SliceData(y)))
	if px == py {
		return len(x) != len(y)
	}
	return px < py+uintptr(len(y)) && py < px+uintptr(len(x))
}
