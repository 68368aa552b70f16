package reduce

import (
	"encoding/binary"
	"fmt"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Float32 accumulation for the reduced-precision float types.
//
// Reduce rounds to the element type after every combine. A reduction of N
// contributions can instead keep a float32 accumulator and round once at the
// end (ZipCCL's reduce-scatter does this: the wire carries bfloat16, the
// arithmetic is float32). The kernels below are its three steps:
//
//	acc     = wide(x[0]) op wide(x[1])            AccumInit
//	acc     = acc op wide(x[i])   for 1 < i < N-1  Accum
//	dst     = narrow(acc op wide(x[N-1]))          AccumFinish
//
// where wide is the exact conversion to float32 (dtype.BF16ToF32, ...),
// narrow the round-to-nearest-even conversion back (dtype.F32ToBF16, ...)
// and op the float32 operation. For N = 2 that is exactly Reduce3. A NaN
// result of a float32 step is the x86 rule's NaN for (left, right) on every
// architecture, as in Reduce; narrowing then treats it like Reduce does
// (bfloat16 NaN becomes 0x7FC0; float16 and float8 keep the sign).
//
// Only SUM and PRODUCT round, so only they are accumulated (AVG and
// PREMUL_SUM combine as SUM). MIN and MAX are exact in the element type;
// use Reduce for them (it keeps NaN bits, which a float32 round trip would
// canonicalise for bfloat16).
//
// The element buffers are little-endian and need no alignment; acc is in
// host order. Lengths are in elements: len(acc) elements of dt.

// Accumulable reports whether AccumInit, Accum and AccumFinish support
// (dt, op): dt is bfloat16, float16, float8_e4m3fn or float8_e5m2, and op
// is Sum, Product, Avg or PreMulSum.
func Accumulable(dt dtype.DType, op Op) bool {
	switch dt {
	case dtype.BFloat16, dtype.Float16, dtype.Float8E4M3FN, dtype.Float8E5M2:
	default:
		return false
	}
	switch op {
	case Sum, Product, Avg, PreMulSum:
		return true
	}
	return false
}

// AccumInit sets acc[i] = wide(a[i]) op wide(b[i]). a and b may overlap.
func AccumInit(dt dtype.DType, op Op, acc []float32, a, b []byte) {
	checkAccum("AccumInit", dt, op, len(acc), a, b)
	done := accumInitSIMD(dt, op, acc, a, b)
	es := dt.Size()
	acc, a, b = acc[done:], a[done*es:], b[done*es:]
	mul := isMul(op)
	var t [accChunk]float32
	for len(acc) > 0 {
		m := min(accChunk, len(acc))
		widenGo(dt, acc[:m], a)
		widenGo(dt, t[:m], b)
		combineF32(mul, acc[:m], acc[:m], t[:m])
		acc, a, b = acc[m:], a[m*es:], b[m*es:]
	}
}

// Accum sets acc[i] = acc[i] op wide(src[i]).
func Accum(dt dtype.DType, op Op, acc []float32, src []byte) {
	checkAccum("Accum", dt, op, len(acc), src)
	done := accumSIMD(dt, op, acc, src)
	es := dt.Size()
	acc, src = acc[done:], src[done*es:]
	mul := isMul(op)
	var t [accChunk]float32
	for len(acc) > 0 {
		m := min(accChunk, len(acc))
		widenGo(dt, t[:m], src)
		combineF32(mul, acc[:m], acc[:m], t[:m])
		acc, src = acc[m:], src[m*es:]
	}
}

// AccumFinish sets dst[i] = narrow(acc[i] op wide(src[i])). dst may be
// exactly src (the same start and length) but must not otherwise overlap it.
func AccumFinish(dt dtype.DType, op Op, dst []byte, acc []float32, src []byte) {
	checkAccum("AccumFinish", dt, op, len(acc), dst, src)
	if partialOverlap(dst, src) {
		panic("zipccl/reduce: AccumFinish: destination partially overlaps the source")
	}
	done := accumFinishSIMD(dt, op, dst, acc, src)
	es := dt.Size()
	dst, acc, src = dst[done*es:], acc[done:], src[done*es:]
	mul := isMul(op)
	var t [accChunk]float32
	for len(acc) > 0 {
		m := min(accChunk, len(acc))
		widenGo(dt, t[:m], src) // read before dst (which may be src) is written
		combineF32(mul, t[:m], acc[:m], t[:m])
		narrowGo(dt, dst, t[:m])
		dst, acc, src = dst[m*es:], acc[m:], src[m*es:]
	}
}

// Widen sets acc[i] = wide(src[i]) for a bfloat16, float16 or float8 src.
func Widen(dt dtype.DType, acc []float32, src []byte) {
	checkAccum("Widen", dt, Sum, len(acc), src)
	done := widenSIMD(dt, acc, src)
	widenGo(dt, acc[done:], src[done*dt.Size():])
}

// Narrow sets dst[i] = narrow(acc[i]) for a bfloat16, float16 or float8 dst.
func Narrow(dt dtype.DType, dst []byte, acc []float32) {
	checkAccum("Narrow", dt, Sum, len(acc), dst)
	done := narrowSIMD(dt, dst, acc)
	narrowGo(dt, dst[done*dt.Size():], acc[done:])
}

// accChunk is the number of elements the portable kernels widen at a time
// into a stack buffer.
const accChunk = 512

func isMul(op Op) bool { return op == Product }

func checkAccum(fn string, dt dtype.DType, op Op, n int, bufs ...[]byte) {
	if !Accumulable(dt, op) {
		panic(fmt.Sprintf("zipccl/reduce: %s: %v on %v is not a float32 accumulation", fn, op, dt))
	}
	for _, b := range bufs {
		if len(b) != n*dt.Size() {
			panic(fmt.Sprintf("zipccl/reduce: %s: buffer of %d bytes for %d %v elements", fn, len(b), n, dt))
		}
	}
}

// combineF32 sets d[i] = x[i] op y[i] in float32, with x86's NaN rule.
// d may be x or y.
func combineF32(mul bool, d, x, y []float32) {
	x, y = x[:len(d)], y[:len(d)]
	if mul {
		for i := range d {
			r := x[i] * y[i]
			if r != r {
				r = x86NaN(x[i], y[i])
			}
			d[i] = r
		}
		return
	}
	for i := range d {
		r := x[i] + y[i]
		if r != r {
			r = x86NaN(x[i], y[i])
		}
		d[i] = r
	}
}

// widenGo converts len(d) elements of src to float32.
func widenGo(dt dtype.DType, d []float32, src []byte) {
	switch dt {
	case dtype.BFloat16:
		src = src[:2*len(d)]
		for i := range d {
			d[i] = dtype.BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case dtype.Float16:
		src = src[:2*len(d)]
		for i := range d {
			d[i] = dtype.F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case dtype.Float8E4M3FN:
		src = src[:len(d)]
		for i := range d {
			d[i] = e4m3Wide[src[i]]
		}
	case dtype.Float8E5M2:
		src = src[:len(d)]
		for i := range d {
			d[i] = e5m2Wide[src[i]]
		}
	}
}

// e4m3Wide and e5m2Wide hold the exact float32 value (NaN bits included) of
// every float8 encoding.
var e4m3Wide, e5m2Wide = func() (a, b [256]float32) {
	for i := range 256 {
		a[i] = dtype.E4M3FNToF32(uint8(i))
		b[i] = dtype.E5M2ToF32(uint8(i))
	}
	return
}()

// narrowGo rounds len(s) float32 values into dst.
func narrowGo(dt dtype.DType, dst []byte, s []float32) {
	switch dt {
	case dtype.BFloat16:
		dst = dst[:2*len(s)]
		for i, f := range s {
			binary.LittleEndian.PutUint16(dst[2*i:], dtype.F32ToBF16(f))
		}
	case dtype.Float16:
		dst = dst[:2*len(s)]
		for i, f := range s {
			h, ok := f16Normal(f)
			if !ok {
				h = dtype.F32ToF16(f)
			}
			binary.LittleEndian.PutUint16(dst[2*i:], h)
		}
	case dtype.Float8E4M3FN:
		dst = dst[:len(s)]
		for i, f := range s {
			dst[i] = dtype.F32ToE4M3FN(f)
		}
	case dtype.Float8E5M2:
		dst = dst[:len(s)]
		for i, f := range s {
			dst[i] = dtype.F32ToE5M2(f)
		}
	}
}
