package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/reduce"
)

// Encode codes src (whole elements of dt) with mode in blocks of block
// elements: the main part (MainLen bytes) is written into main[:MainLen]
// and the exact part appended to exact, which is returned.
func Encode(main []byte, exact []byte, src []byte, dt dtype.DType, mode Mode, block int) ([]byte, error) {
	if !mode.valid() {
		return exact, fmt.Errorf("quant: unknown mode %v", mode)
	}
	if !Supported(dt) {
		return exact, fmt.Errorf("quant: %v cannot be coded lossily (float32, bfloat16 and float16 can)", dt)
	}
	if err := CheckBlock(mode, block); err != nil {
		return exact, err
	}
	es := dt.Size()
	if len(src)%es != 0 {
		return exact, fmt.Errorf("quant: %d bytes is not a whole number of %v elements", len(src), dt)
	}
	numel := len(src) / es
	nb := Blocks(numel, block)
	n := MainLen(mode, numel, block)
	if len(main) < n {
		return exact, fmt.Errorf("quant: main part needs %d bytes, got %d", n, len(main))
	}
	main = main[:n]
	sl := mode.scaleLen()
	scales := main[HeaderLen : HeaderLen+sl*nb]
	codes := main[HeaderLen+sl*nb:]
	var f *fp8Scratch
	if mode == FP8 {
		f = newFP8Scratch(block)
	}
	x := make([]float32, block)
	qmax := mode.qmax()
	nexact := 0
	for b := range nb {
		lo, hi := b*block, min(numel, (b+1)*block)
		raw := src[lo*es : hi*es]
		out := codes[mode.CodesLen(lo, block):mode.CodesLen(hi, block)] // lo is even: whole bytes
		sc := scales[sl*b : sl*(b+1)]
		absmax, finite := absMax(dt, raw)
		if mode == FP8 && finite {
			var s, alpha float32
			s, alpha, finite = f.encode(dt, out, raw)
			binary.LittleEndian.PutUint32(sc, math.Float32bits(s))
			binary.LittleEndian.PutUint32(sc[4:], math.Float32bits(alpha))
		}
		switch {
		case !finite || mode != FP8 && absmax != 0 && math.IsInf(float64(qmax/absmax), 1):
			// NaN or infinity (or, fp8, a transform that overflows); or
			// values so small that inv would overflow (int8: absmax <
			// Q / MaxFloat32, about 3.7e-37; fp8: fp8Tiny): exact
			clear(sc)
			binary.LittleEndian.PutUint32(sc, exactScale)
			clear(out)
			exact = append(exact, raw...)
			nexact++
		case mode == FP8:
		case absmax == 0:
			binary.LittleEndian.PutUint32(sc, 0)
			clear(out)
		case mode == Int8:
			binary.LittleEndian.PutUint32(sc, math.Float32bits(absmax/qmax))
			quantize(dt, out, raw, x, qmax/absmax)
		default:
			binary.LittleEndian.PutUint32(sc, math.Float32bits(absmax/qmax))
			quantize4(dt, out, raw, x, qmax/absmax)
		}
	}
	putHeader(main, mode, dt, numel, block, nexact)
	return exact, nil
}

// EncodeFloat32 is Encode of float32 values held as a []float32 (package
// lossy's accumulators).
func EncodeFloat32(main []byte, exact []byte, src []float32, mode Mode, block int) ([]byte, error) {
	return Encode(main, exact, bufs.Float32Bytes(src), dtype.Float32, mode, block)
}

// absMax is the largest magnitude of a block of dt, and false if the block
// holds a NaN or an infinity. Magnitudes are compared as integers: for
// IEEE formats their order is the values' order (NaNs above infinity).
func absMax(dt dtype.DType, src []byte) (float32, bool) {
	if dt == dtype.Float32 {
		m := absMax32(src)
		return math.Float32frombits(m), m < 0x7F800000
	}
	m := absMax16(src)
	if dt == dtype.BFloat16 {
		return dtype.BF16ToF32(m), m < 0x7F80
	}
	return dtype.F16ToF32(m), m < 0x7C00 // float16
}

// absMax32Go is absMax32's portable code.
func absMax32Go(src []byte) uint32 {
	var m0, m1 uint32
	i := 0
	for ; i+8 <= len(src); i += 8 {
		m0 = max(m0, binary.LittleEndian.Uint32(src[i:])&0x7FFFFFFF)
		m1 = max(m1, binary.LittleEndian.Uint32(src[i+4:])&0x7FFFFFFF)
	}
	if i+4 <= len(src) {
		m0 = max(m0, binary.LittleEndian.Uint32(src[i:])&0x7FFFFFFF)
	}
	return max(m0, m1)
}

// absMax16Go is absMax16's portable code: four lanes to a word, each lane
// its own running maximum, so that the comparisons do not wait on each
// other.
func absMax16Go(src []byte) uint16 {
	var m0, m1, m2, m3 uint64
	i := 0
	for ; i+8 <= len(src); i += 8 {
		w := binary.LittleEndian.Uint64(src[i:])
		m0 = max(m0, w&0x7FFF)
		m1 = max(m1, w>>16&0x7FFF)
		m2 = max(m2, w>>32&0x7FFF)
		m3 = max(m3, w>>48&0x7FFF)
	}
	for ; i+2 <= len(src); i += 2 {
		m0 = max(m0, uint64(binary.LittleEndian.Uint16(src[i:])&0x7FFF))
	}
	return uint16(max(m0, m1, m2, m3))
}

// rne is 1.5 * 2^23: for |y| < 2^22, y + rne in float32 is y rounded to
// an integer (ties to even: the sum's ulp is 1) plus rne, whose bits are
// then rneBits plus that integer.
const (
	rne     = 12582912
	rneBits = 0x4B400000
)

// code is rne(v * inv) as a byte (two's complement; int4 takes its low
// nibble). The conversions keep the product and the sum two float32
// roundings, never one FMA, as the CUDA kernels compute them.
func code(v, inv float32) byte {
	y := float32(v * inv)
	return byte(math.Float32bits(float32(y+rne)) - rneBits)
}

// quantize sets q[i] = rne(x[i] * inv) for the elements of src, as int8.
// |x| <= absmax makes |x*inv| at most qmax plus float32 rounding, so the
// code is within [-qmax, qmax]. x is scratch (float16 and float32 widen
// into it).
func quantize(dt dtype.DType, q, src []byte, x []float32, inv float32) {
	done := quantSIMD(dt, Int8, q, src, inv)
	q, src = q[done:], src[done*dt.Size():]
	if dt == dtype.BFloat16 {
		q = q[:len(src)/2]
		for i := range q {
			q[i] = code(math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16), inv)
		}
		return
	}
	xs := x[:len(src)/dt.Size()]
	widen(dt, xs, src)
	q = q[:len(xs)]
	for i, v := range xs {
		q[i] = code(v, inv)
	}
}

// quantize4 is quantize for int4, packing as it goes (pack4's order).
func quantize4(dt dtype.DType, out, src []byte, x []float32, inv float32) {
	done := quantSIMD(dt, Int4, out, src, inv) // even: whole bytes
	out, src = out[done/2:], src[done*dt.Size():]
	n := len(src) / dt.Size()
	if dt == dtype.BFloat16 {
		k := 0
		for ; k+4 <= len(src); k += 4 {
			w := binary.LittleEndian.Uint32(src[k:])
			hi := code(math.Float32frombits(w<<16), inv)
			lo := code(math.Float32frombits(w&0xFFFF0000), inv)
			out[k/4] = hi<<4 | lo&15
		}
		if k < len(src) {
			out[k/4] = code(math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[k:]))<<16), inv) << 4
		}
		return
	}
	xs := x[:n]
	widen(dt, xs, src)
	k := 0
	for ; k+1 < n; k += 2 {
		out[k/2] = code(xs[k], inv)<<4 | code(xs[k+1], inv)&15
	}
	if k < n {
		out[k/2] = code(xs[k], inv) << 4
	}
}

// widen sets d[i] to src's elements as float32 (exact).
func widen(dt dtype.DType, d []float32, src []byte) {
	if dt != dtype.Float32 {
		reduce.Widen(dt, d, src) // bfloat16, float16
		return
	}
	for i := range d {
		d[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// narrow sets dst's elements of dt to s's values rounded to dt.
func narrow(dt dtype.DType, dst []byte, s []float32) {
	if dt != dtype.Float32 {
		reduce.Narrow(dt, dst, s)
		return
	}
	copy(dst, bufs.Float32Bytes(s))
}
