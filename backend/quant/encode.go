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
	if err := checkBlock(block); err != nil {
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
	scales := main[HeaderLen : HeaderLen+4*nb]
	codes := main[HeaderLen+4*nb:]
	x := make([]float32, block)
	var q []byte // int4: a block's codes before packing
	if mode == Int4 {
		q = make([]byte, block)
	}
	qmax := mode.qmax()
	nexact := 0
	for b := range nb {
		lo, hi := b*block, min(numel, (b+1)*block)
		raw := src[lo*es : hi*es]
		out := codes[mode.CodesLen(lo):mode.CodesLen(hi)] // lo is even: whole bytes
		absmax, finite := absMax(dt, raw)
		switch {
		case !finite:
			binary.LittleEndian.PutUint32(scales[4*b:], exactScale)
			clear(out)
			exact = append(exact, raw...)
			nexact++
			continue
		case absmax == 0:
			binary.LittleEndian.PutUint32(scales[4*b:], 0)
			clear(out)
			continue
		}
		binary.LittleEndian.PutUint32(scales[4*b:], math.Float32bits(absmax/qmax))
		if mode == Int8 {
			quantize(dt, out, raw, x, qmax/absmax)
			continue
		}
		quantize(dt, q, raw, x, qmax/absmax)
		pack4(out, q[:hi-lo])
	}
	putHeader(main, mode, dt, numel, block, nexact)
	return exact, nil
}

// EncodeFloat32 is Encode of float32 values held as a []float32 (package
// lossy's accumulators).
func EncodeFloat32(main []byte, exact []byte, src []float32, mode Mode, block int) ([]byte, error) {
	return Encode(main, exact, bufs.Float32Bytes(src), dtype.Float32, mode, block)
}

// pack4 packs int4 codes two per byte: element 2k in the high nibble,
// element 2k+1 in the low one (DeepSpeed's order), an odd count's last
// low nibble 0.
func pack4(dst, q []byte) {
	k := 0
	for ; k+1 < len(q); k += 2 {
		dst[k/2] = q[k]<<4 | q[k+1]&15
	}
	if k < len(q) {
		dst[k/2] = q[k] << 4
	}
}

// absMax is the largest magnitude of a block of dt, and false if the block
// holds a NaN or an infinity. Magnitudes are compared as integers: for
// IEEE formats their order is the values' order (NaNs above infinity).
func absMax(dt dtype.DType, src []byte) (float32, bool) {
	switch dt {
	case dtype.Float32:
		var m uint32
		for i := 0; i+4 <= len(src); i += 4 {
			m = max(m, binary.LittleEndian.Uint32(src[i:])&0x7FFFFFFF)
		}
		return math.Float32frombits(m), m < 0x7F800000
	case dtype.BFloat16:
		var m uint16
		for i := 0; i+2 <= len(src); i += 2 {
			m = max(m, binary.LittleEndian.Uint16(src[i:])&0x7FFF)
		}
		return dtype.BF16ToF32(m), m < 0x7F80
	default: // float16
		var m uint16
		for i := 0; i+2 <= len(src); i += 2 {
			m = max(m, binary.LittleEndian.Uint16(src[i:])&0x7FFF)
		}
		return dtype.F16ToF32(m), m < 0x7C00
	}
}

// rne is 1.5 * 2^23: for |y| < 2^22, (y + rne) - rne in float32 is y
// rounded to an integer, ties to even (the sum's ulp is 1).
const rne = 12582912

// quantize sets q[i] = rne(x[i] * inv) for the elements of src, as int8.
// |x| <= absmax makes |x*inv| at most qmax plus float32 rounding, so the
// code is within [-qmax, qmax]. x is scratch (float16 and float32 widen
// into it).
func quantize(dt dtype.DType, q, src []byte, x []float32, inv float32) {
	code := func(v float32) byte {
		y := float32(v * inv) // conversions: never fused into one FMA
		r := float32(y+rne) - rne
		return byte(int8(r))
	}
	if dt == dtype.BFloat16 {
		q = q[:len(src)/2]
		for i := range q {
			q[i] = code(math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16))
		}
		return
	}
	xs := x[:len(src)/dt.Size()]
	widen(dt, xs, src)
	q = q[:len(xs)]
	for i, v := range xs {
		q[i] = code(v)
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
