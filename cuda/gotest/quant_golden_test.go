package gotest

// Golden vectors of the lossy quantization kernels (cuda/zc_quant.h) for
// their CPU emulation (tests/cuda_emu/test_quant.cpp): package quant is the
// reference. This file defines the inputs, codes them with quant.Encode,
// decodes and accumulates them with quant.Decode and quant.Accumulate, and
// writes the expected bytes to tests/cuda_emu/golden/quant.bin; it also
// corrupts messages and records quant's verdict on each. Small inputs are
// stored; the large ones (several scan tiles, block 65536) are generated
// on both sides from splitmix64 with integer arithmetic only (quantGen
// here, gen in test_quant.cpp) and only CRC-32C and lengths are stored.
//
//	ZIPCCL_WRITE_GOLDEN=1 go test -run TestWriteQuantGolden ./cuda/gotest/
//
// rewrites the file; TestQuantGoldenUpToDate fails when package quant no
// longer writes what the file holds. These tests need no GPU and no build
// tag.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/quant"
)

const quantGoldenPath = "../../tests/cuda_emu/golden/quant.bin"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

type qsplitmix struct{ s uint64 }

func (r *qsplitmix) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// quantGen makes n elements of dt with integer arithmetic only (gen in
// tests/cuda_emu/test_quant.cpp is its twin): random signs, mantissas and
// mid-range exponents; in block b (of block elements) element 5 is a NaN
// or an infinity when b%7 == 3, every element a signed zero when b%11 ==
// 6, and every third element subnormal when b%13 == 9.
func quantGen(dt dtype.DType, n, block int, seed uint64) []byte {
	r := qsplitmix{seed}
	out := make([]byte, n*dt.Size())
	for i := range n {
		x := r.next()
		b, k := i/block, i%block
		var sign, exp, mant, expMax uint64
		var shift uint
		switch dt {
		case dtype.BFloat16:
			shift, expMax = 7, 255
			exp = 100 + (x>>20)%40
		case dtype.Float16:
			shift, expMax = 10, 31
			exp = 1 + (x>>20)%29
		default:
			shift, expMax = 23, 255
			exp = 100 + (x>>20)%40
		}
		sign = x & 1
		mant = (x >> 32) & (1<<shift - 1)
		switch {
		case b%7 == 3 && k == 5:
			exp = expMax
			mant = (x >> 40) & 3 // 0: an infinity
		case b%11 == 6:
			exp, mant = 0, 0
		case b%13 == 9 && k%3 == 0:
			exp = 0
		}
		v := sign<<(shift+uint(bitsOf(dt))) | exp<<shift | mant
		if dt == dtype.Float32 {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
		} else {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
		}
	}
	return out
}

// bitsOf is the width of dt's exponent field.
func bitsOf(dt dtype.DType) int {
	if dt == dtype.Float16 {
		return 5
	}
	return 8
}

// qbuf builds a stored input element by element.
type qbuf struct {
	dt  dtype.DType
	buf []byte
}

func (q qbuf) bits(i int, v uint32) {
	if q.dt == dtype.Float32 {
		binary.LittleEndian.PutUint32(q.buf[4*i:], v)
	} else {
		binary.LittleEndian.PutUint16(q.buf[2*i:], uint16(v))
	}
}

func (q qbuf) f(i int, v float32) { dtype.PutFloat32(q.dt, q.buf, i, v) }

// quantMix is the stored input of the "mix" cases: 6 blocks of 64 and a
// tail of 37 (odd: int4's padding nibble), n = 421:
//
//	0 ties: absmax = Q makes inv 1, and x = k + 0.5 rounds to even
//	1 signed zeros (scale 0)
//	2 the absmax negative, and subnormals
//	3 NaNs (signalling, with payloads): exact
//	4 an infinity (its sign alternates between cases): exact
//	5 float32 / bfloat16: absmax 4e-37, whose inv Q / absmax is near
//	  MaxFloat32, and subnormals; float16: subnormals only (the "tiny"
//	  cases hold a smaller absmax, whose inv overflows: exact)
//	6 (37 elements) wide magnitudes
func quantMix(dt dtype.DType, mode quant.Mode, idx int) []byte {
	const B, n = 64, 421
	q := qbuf{dt, make([]byte, n*dt.Size())}
	r := qsplitmix{uint64(1000 + idx)}
	Q := float32(127)
	if mode == quant.Int4 {
		Q = 7
	}
	// block 0
	ties := []float32{Q, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, Q - 0.5, -(Q - 0.5), 3.5, -3.5, 4.5, -Q}
	for k := range B {
		if k < len(ties) {
			q.f(k, ties[k])
		} else {
			q.f(k, float32(int(r.next()%uint64(2*Q+1))-int(Q))/2)
		}
	}
	// block 1
	for k := range B {
		q.bits(B+k, uint32(k&1)<<(8*dt.Size()-1))
	}
	// block 2
	for k := range B {
		q.f(2*B+k, float32(int(r.next()%701)-350)/100)
	}
	q.f(2*B+7, -3.75)
	if dt == dtype.Float32 {
		q.bits(2*B+9, 0x00000003)
	} else {
		q.bits(2*B+9, 0x8001)
	}
	// block 3
	for k := range B {
		q.f(3*B+k, float32(int(r.next()%2001)-1000)/7)
	}
	switch dt {
	case dtype.Float32:
		q.bits(3*B+5, 0x7FA00001)
		q.bits(3*B+9, 0xFFC00321)
	case dtype.BFloat16:
		q.bits(3*B+5, 0xFF81)
	default:
		q.bits(3*B+5, 0x7D01)
	}
	// block 4
	for k := range B {
		q.f(4*B+k, float32(int(r.next()%2001)-1000)/3)
	}
	inf := float32(math.Inf(1))
	if idx%2 == 1 {
		inf = -inf
	}
	q.f(4*B+10, inf)
	// block 5
	for k := range B {
		if dt == dtype.Float16 {
			q.bits(5*B+k, uint32(r.next()%0x3FF)|uint32(k&1)<<15)
		} else {
			v := float32(int(r.next()%2001)-1000) * 1e-41
			q.f(5*B+k, v)
		}
	}
	if dt != dtype.Float16 {
		q.f(5*B+3, -4e-37)
		q.f(5*B+4, 0)
	}
	// block 6
	for k := range n - 6*B {
		q.f(6*B+k, float32(k-18)*0.3137*float32(int(1)<<(k%5)))
	}
	return q.buf
}

// quant2048 is the stored input of the "b2048" cases: the collectives'
// block size, blocks 0 and 2 random, 1 exact (a NaN), and the short last
// block (1001 elements) exact (an infinity), n = 7145.
func quant2048(dt dtype.DType, idx int) []byte {
	const B, n = 2048, 7145
	q := qbuf{dt, make([]byte, n*dt.Size())}
	r := qsplitmix{uint64(2000 + idx)}
	for i := range n {
		x := r.next()
		q.f(i, float32(int64(x%200001)-100000)*float32(1+int(x>>60))*1e-5)
	}
	switch dt {
	case dtype.Float32:
		q.bits(B+100, 0x7FC00000)
		q.bits(3*B+1000, 0xFF800000)
	case dtype.BFloat16:
		q.bits(B+100, 0x7FC0)
		q.bits(3*B+1000, 0xFF80)
	default:
		q.bits(B+100, 0x7E00)
		q.bits(3*B+1000, 0xFC00)
	}
	return q.buf
}

// quantTiny is the stored input of the "tiny" cases: block 0's absmax is
// 1e-38 (Q / absmax overflows float32: the block travels exact), block 1's
// 4e-37 (coded, inv near MaxFloat32 for int8), n = 64.
func quantTiny(dt dtype.DType) []byte {
	q := qbuf{dt, make([]byte, 64*dt.Size())}
	for k := range 32 {
		q.f(k, float32(k-16)*1e-38/16)
		q.f(32+k, float32(k-16)*4e-37/16)
	}
	return q.buf
}

// quantFP8Edge is the stored input of the "fp8edge" cases: blocks of 32
// for what fp8's coding singles out, then a short tail, n = 333 (float16
// rounds the huge values to infinities and the tiny ones to zeros):
//
//	0 3e38 everywhere: the transform overflows, exact
//	1 ±1e37: coded, a huge scale
//	2 one element 3.4e38: coded, Σx² overflows (α 0)
//	3 ±1e-35: max|u| below 2^-100, exact
//	4 one element 2^-100: max|u| exactly 2^-100, coded
//	5 one element just below 2^-100: exact
//	6 zeros (s 0, α from ε alone), 7 negative zeros
//	8 subnormals: exact (max|u| far below 2^-100; float16's are coded)
//	9 x = H y / 32 with y_0 = 1 and y_i = ±2^-(i/2+8): small codes,
//	  E4M3 subnormals among them
//	10 (13 elements) random
func quantFP8Edge(dt dtype.DType, idx int) []byte {
	const B, n = 32, 333
	q := qbuf{dt, make([]byte, n*dt.Size())}
	r := qsplitmix{uint64(3000 + idx)}
	sign := func() float32 {
		if r.next()&1 == 1 {
			return -1
		}
		return 1
	}
	for k := range B {
		q.f(k, 3e38)
		q.f(B+k, sign()*1e37*float32(1+k%3))
		q.f(2*B+k, 0)
		q.f(3*B+k, sign()*1e-35*float32(1+k%5))
		q.f(4*B+k, 0)
		q.f(5*B+k, 0)
		q.f(6*B+k, 0)
		q.bits(7*B+k, uint32(1)<<(8*dt.Size()-1))
		if dt == dtype.Float32 {
			q.bits(8*B+k, uint32(r.next()%0x7FFFFF)|uint32(k&1)<<31)
		} else {
			q.bits(8*B+k, uint32(r.next()%0x7F)|uint32(k&1)<<15)
		}
	}
	q.f(2*B+5, 3.4e38)
	q.f(4*B+9, math.Float32frombits(0x0D800000))
	if dt == dtype.Float32 {
		q.bits(5*B+9, 0x8D7FFFFF)
	} else {
		q.bits(5*B+9, 0x8D7F)
	}
	// block 9: the transform of y, in float64, so that H x = 32 y within
	// the dtype's rounding
	var y [B]float64
	y[0] = 1
	for i := 1; i < B; i++ {
		y[i] = float64(sign()) * math.Ldexp(1, -(i/2+8))
	}
	for i := range B {
		var x float64
		for j := range B {
			if bits.OnesCount(uint(i&j))%2 == 1 {
				x -= y[j]
			} else {
				x += y[j]
			}
		}
		q.f(9*B+i, float32(x/B))
	}
	for k := range n - 10*B {
		q.f(10*B+k, float32(int(r.next()%2001)-1000)/17)
	}
	return q.buf
}

// quantFP8Ties is the stored input of "fp8ties_f32", one block of 32
// float32 elements whose transform is exactly u below (every partial sum
// is a multiple of 2^-15 below 2^9, exact in float32): max|u| = 448 makes
// inv 1, so the codes round u itself, and u holds E4M3 ties, subnormal
// ((2k+1) 2^-10) and normal ones, of both signs.
func quantFP8Ties() []byte {
	const B = 32
	u := [B]float64{448}
	for k := range 8 {
		u[1+k] = float64(2*k+1) / 1024
		u[9+k] = -float64(2*k+1) / 1024
	}
	copy(u[17:], []float64{1 + 1.0/16, 1 + 3.0/16, 2 + 1.0/8, -(1 + 1.0/16), 0.5 + 1.0/32, 248, -248, 3.0 / 64, -3.0 / 64,
		17.0 / 1024, 192 + 8, -(96 + 4), 1.0 / 2048, -1.0 / 2048, 7})
	q := qbuf{dtype.Float32, make([]byte, 4*B)}
	for i := range B {
		var x float64
		for j := range B {
			if bits.OnesCount(uint(i&j))%2 == 1 {
				x -= u[j]
			} else {
				x += u[j]
			}
		}
		if float64(float32(x/B)) != x/B {
			panic("fp8ties: inexact input")
		}
		q.f(i, float32(x/B))
	}
	return q.buf
}

type quantCase struct {
	name  string
	dt    dtype.DType
	mode  quant.Mode
	block int
	n     int
	seed  uint64 // generated input when non-zero
	input []byte // stored input
}

func (c quantCase) src() []byte {
	if c.seed != 0 {
		return quantGen(c.dt, c.n, c.block, c.seed)
	}
	return c.input
}

var quantDTypes = []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16}

func dtName(dt dtype.DType) string {
	return map[dtype.DType]string{dtype.Float32: "f32", dtype.BFloat16: "bf16", dtype.Float16: "f16"}[dt]
}

func quantCases() []quantCase {
	var cs []quantCase
	for i, dt := range quantDTypes {
		for j, mode := range []quant.Mode{quant.Int8, quant.Int4} {
			idx := 2*i + j
			cs = append(cs,
				quantCase{name: fmt.Sprintf("mix_%s_%v", dtName(dt), mode), dt: dt, mode: mode, block: 64, n: 421,
					input: quantMix(dt, mode, idx)},
				quantCase{name: fmt.Sprintf("b2048_%s_%v", dtName(dt), mode), dt: dt, mode: mode, block: 2048, n: 7145,
					input: quant2048(dt, idx)})
		}
	}
	for i, dt := range quantDTypes {
		cs = append(cs,
			quantCase{name: fmt.Sprintf("mix_%s_fp8", dtName(dt)), dt: dt, mode: quant.FP8, block: 64, n: 421,
				input: quantMix(dt, quant.FP8, 6+i)},
			quantCase{name: fmt.Sprintf("fp8edge_%s", dtName(dt)), dt: dt, mode: quant.FP8, block: 32, n: 333,
				input: quantFP8Edge(dt, i)})
		// every fp8 block size, generated: NaN and infinite blocks, zero
		// blocks, subnormals, a short tail
		for k, block := range []int{32, 64, 128, 256, 512, 1024} {
			cs = append(cs, quantCase{name: fmt.Sprintf("gen_b%d_%s_fp8", block, dtName(dt)), dt: dt, mode: quant.FP8,
				block: block, n: 15*block + block/2 + 3, seed: uint64(100 + 10*i + k)})
		}
	}
	cs = append(cs,
		quantCase{name: "fp8ties_f32", dt: dtype.Float32, mode: quant.FP8, block: 32, n: 32, input: quantFP8Ties()},
		quantCase{name: "one_f32_fp8", dt: dtype.Float32, mode: quant.FP8, block: 1024, n: 1, input: []byte{0, 0, 0xC0, 0xBF}},
		quantCase{name: "empty_bf16_fp8", dt: dtype.BFloat16, mode: quant.FP8, block: 256, n: 0, input: []byte{}},
		// several scan tiles of fp8 blocks
		quantCase{name: "gen_tiles_bf16_fp8", dt: dtype.BFloat16, mode: quant.FP8, block: 32, n: 8192*32 + 700*32 + 5, seed: 15},
	)
	return append(cs,
		quantCase{name: "tiny_f32_int8", dt: dtype.Float32, mode: quant.Int8, block: 32, n: 64, input: quantTiny(dtype.Float32)},
		quantCase{name: "tiny_bf16_int4", dt: dtype.BFloat16, mode: quant.Int4, block: 32, n: 64, input: quantTiny(dtype.BFloat16)},
		quantCase{name: "empty_f32_int8", dt: dtype.Float32, mode: quant.Int8, block: 2048, n: 0, input: []byte{}},
		quantCase{name: "one_bf16_int4", dt: dtype.BFloat16, mode: quant.Int4, block: 32, n: 1, input: []byte{0x80, 0xBF}},
		quantCase{name: "one_nan_f16_int4", dt: dtype.Float16, mode: quant.Int4, block: 32, n: 1, input: []byte{0x01, 0x7E}},
		// several scan tiles (8192 blocks each), exact blocks in all of them
		quantCase{name: "gen_tiles_bf16_int4", dt: dtype.BFloat16, mode: quant.Int4, block: 32, n: 8192*32 + 5000*32 + 17, seed: 11},
		quantCase{name: "gen_tiles_f32_int8", dt: dtype.Float32, mode: quant.Int8, block: 32, n: 8192*32 + 1234*32 + 7, seed: 12},
		quantCase{name: "gen_b65536_f16_int8", dt: dtype.Float16, mode: quant.Int8, block: 65536, n: 70001, seed: 13},
		quantCase{name: "gen_b256_f32_int4", dt: dtype.Float32, mode: quant.Int4, block: 256, n: 40000, seed: 14},
	)
}

// decodeTargets are the dtypes a message of dt decodes into.
func decodeTargets(dt dtype.DType) []dtype.DType {
	if dt == dtype.Float32 {
		return quantDTypes
	}
	return []dtype.DType{dt}
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// qverdict is quant's verdict as the emulation test reads it.
func qverdict(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, quant.ErrCorrupt):
		return "corrupt"
	}
	return "other"
}

type quantMsg struct{ main, exact []byte }

func quantEncode(t testing.TB, c quantCase) quantMsg {
	src := c.src()
	main := make([]byte, quant.MainLen(c.mode, c.n, c.block))
	exact, err := quant.Encode(main, nil, src, c.dt, c.mode, c.block)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return quantMsg{main, exact}
}

// corruption is one change to a message: a byte xored, a 32-bit word set,
// or a part's length changed by delta (cut, or zeros appended).
type corruption struct {
	part  string // main, exact
	kind  string // xor, set32, len
	pos   int
	val   int64
	label string
}

func (k corruption) apply(m quantMsg) quantMsg {
	out := quantMsg{append([]byte{}, m.main...), append([]byte{}, m.exact...)}
	p := &out.main
	if k.part == "exact" {
		p = &out.exact
	}
	switch k.kind {
	case "xor":
		(*p)[k.pos] ^= byte(k.val)
	case "set32":
		binary.LittleEndian.PutUint32((*p)[k.pos:], uint32(k.val))
	case "len":
		if k.val < 0 {
			*p = (*p)[:len(*p)+int(k.val)]
		} else {
			*p = append(*p, make([]byte, k.val)...)
		}
	}
	return out
}

// quantCorruptions are targeted changes to c's message (every check of
// quant's decoder, and changes it accepts) and single-bit flips.
func quantCorruptions(c quantCase, m quantMsg) []corruption {
	nb := quant.Blocks(c.n, c.block)
	sl := 4
	if c.mode == quant.FP8 {
		sl = 8
	}
	codes := quant.HeaderLen + sl*nb
	scale := func(b int) int { return quant.HeaderLen + sl*b }
	var ks []corruption
	add := func(part, kind string, pos int, val int64, label string) {
		ks = append(ks, corruption{part, kind, pos, val, label})
	}
	add("main", "xor", 0, 1, "magic")
	add("main", "xor", 1, 0x40, "magic")
	add("main", "xor", 2, 3, "version 2")
	add("main", "xor", 3, 3, "mode 1<->2, 3->0") // another main length, or no mode
	add("main", "xor", 3, 0x10, "mode 17")
	if c.mode != quant.Int8 {
		add("main", "xor", 3, int64(c.mode)^1, "mode int8") // another main length
	}
	add("main", "xor", 4, 6, "dtype 1<->7, 3<->5, 4<->2")
	add("main", "xor", 4, int64(c.dt)^int64(dtype.Float32), "dtype float32")
	add("main", "xor", 5, 0x1F, "block log")
	add("main", "xor", 5, 1, "block log +-1")
	for _, p := range []int{6, 7, 20, 21, 22, 23} {
		add("main", "xor", p, 0x20, fmt.Sprintf("reserved byte %d", p))
	}
	add("main", "xor", 8, 1, "numel +-1")
	add("main", "xor", 15, 0x80, "numel huge")
	add("main", "xor", 16, 1, "exact count +-1")
	add("main", "set32", 16, 0, "exact count 0")
	add("main", "len", 0, -1, "main part short")
	add("main", "len", 0, 1, "main part long")
	add("exact", "len", 0, 1, "exact part long")
	if len(m.exact) > 0 {
		add("exact", "len", 0, -1, "exact part short")
		add("exact", "xor", len(m.exact)/2, 0x5A, "exact byte (accepted)")
	}
	for b := 0; b < nb && b < 8; b++ {
		bits := binary.LittleEndian.Uint32(m.main[scale(b):])
		if bits == 0xFFFFFFFF {
			add("main", "set32", scale(b), 0, fmt.Sprintf("block %d: exact mark cleared", b))
			lo := b * c.block
			add("main", "xor", codes+int(c.mode.CodesLen(lo, c.block)), 0x80, fmt.Sprintf("block %d: exact block's code (accepted)", b))
			continue
		}
		add("main", "set32", scale(b), 0xFFFFFFFF, fmt.Sprintf("block %d: marked exact", b))
		for _, v := range []uint32{0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7C010204, 0x7C010205, 0x00000001, 0} {
			add("main", "set32", scale(b), int64(v), fmt.Sprintf("block %d: scale %#x", b, v))
		}
		lo, hi := b*c.block, min(c.n, (b+1)*c.block)
		first, last := codes+c.mode.CodesLen(lo, c.block), codes+c.mode.CodesLen(hi, c.block)-1
		if c.mode == quant.FP8 {
			// the largest scale (MaxFloat32 / 448) and the next; α's range
			for _, v := range []uint32{0x7B124924, 0x7B124925, 0x3F800000} {
				add("main", "set32", scale(b), int64(v), fmt.Sprintf("block %d: scale %#x", b, v))
			}
			for _, v := range []uint32{0x80000000, 0xBF800000, 0x7F800000, 0x7FC00000, 0xFFC00000, 0x7F7FFFFF, 0, 1} {
				add("main", "set32", scale(b)+4, int64(v), fmt.Sprintf("block %d: alpha %#x", b, v))
			}
			add("main", "xor", first, int64(m.main[first]^0x7F), fmt.Sprintf("block %d: code 0x7f", b))
			add("main", "xor", last, int64(m.main[last]^0xFF), fmt.Sprintf("block %d: last code 0xff", b))
			add("main", "xor", first+3, int64(m.main[first+3]^0x7E), fmt.Sprintf("block %d: code 0x7e (accepted)", b))
			add("main", "xor", first+1, 0x80, fmt.Sprintf("block %d: code's sign (accepted)", b))
			continue
		}
		if c.mode == quant.Int8 {
			add("main", "set32", first, 0x81808180, fmt.Sprintf("block %d: code -128", b))
			add("main", "xor", last, int64(m.main[last]^0x80), fmt.Sprintf("block %d: last code -128", b))
			add("main", "xor", first, int64(m.main[first]^0x81), fmt.Sprintf("block %d: code -127 (accepted)", b))
		} else {
			add("main", "xor", first, int64(m.main[first]&0xF0^0x80), fmt.Sprintf("block %d: high nibble -8", b))
			add("main", "xor", last, int64(m.main[last]&0x0F^0x08), fmt.Sprintf("block %d: low nibble -8", b))
			add("main", "xor", first, int64(m.main[first]&0xF0^0x90), fmt.Sprintf("block %d: high nibble -7 (accepted)", b))
		}
	}
	if c.mode == quant.Int4 && c.n%2 == 1 {
		add("main", "xor", len(m.main)-1, 1, "padding nibble")
	}
	if c.mode == quant.FP8 && c.n%c.block != 0 {
		// the short last block's padding codes travel and count
		add("main", "xor", len(m.main)-1, 0x05, "padding code (accepted)")
		add("main", "set32", len(m.main)-4, 0x7F000000, "padding code 0x7f")
	}
	r := qsplitmix{uint64(len(m.main))*7919 + uint64(c.block)}
	for range 24 {
		add("main", "xor", int(r.next()%uint64(len(m.main))), int64(1)<<(r.next()%8), "bit flip")
	}
	return ks
}

type goldenFile struct {
	buf   bytes.Buffer
	names map[string]bool
}

func (g *goldenFile) add(name string, data []byte) {
	if g.names[name] {
		panic("duplicate golden record " + name)
	}
	g.names[name] = true
	g.buf.Write(binary.LittleEndian.AppendUint16(nil, uint16(len(name))))
	g.buf.WriteString(name)
	g.buf.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(data))))
	g.buf.Write(data)
}

// sum is a record of bytes too many to store: CRC-32C and length.
func sum(b []byte) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(nil, crc32c(b)), uint64(len(b)))
}

func buildQuantGolden(t testing.TB) []byte {
	g := &goldenFile{names: map[string]bool{}}
	g.buf.WriteString("ZCGOLD1\n")
	msgs := map[string]quantMsg{}
	var lines []string
	for _, c := range quantCases() {
		gen := c.seed != 0
		g.add(c.name+"/meta", fmt.Appendf(nil, "dtype=%d mode=%d block=%d n=%d seed=%d", c.dt, c.mode, c.block, c.n, c.seed))
		src := c.src()
		m := quantEncode(t, c)
		msgs[c.name] = m
		put := func(name string, b []byte) {
			if gen {
				g.add(name+"/sum", sum(b))
			} else {
				g.add(name, b)
			}
		}
		put(c.name+"/input", src)
		put(c.name+"/main", m.main)
		put(c.name+"/exact", m.exact)
		for _, dt := range decodeTargets(c.dt) {
			out := make([]byte, c.n*dt.Size())
			if err := quant.Decode(out, m.main, m.exact, dt); err != nil {
				t.Fatalf("%s: decode into %v: %v", c.name, dt, err)
			}
			put(fmt.Sprintf("%s/dec/%d", c.name, dt), out)
		}
		acc := make([]float32, c.n)
		if err := quant.Accumulate(acc, m.main, m.exact, true); err != nil {
			t.Fatalf("%s: accumulate: %v", c.name, err)
		}
		put(c.name+"/acc", f32Bytes(acc))
		if gen || (!strings.HasPrefix(c.name, "mix_") && c.name != "b2048_f32_int4" && c.name != "one_bf16_int4") {
			continue
		}
		for _, k := range quantCorruptions(c, m) {
			bad := k.apply(m)
			dec := make([]byte, c.n*c.dt.Size())
			derr := quant.Decode(dec, bad.main, bad.exact, c.dt)
			acc := make([]float32, c.n)
			aerr := quant.Accumulate(acc, bad.main, bad.exact, true)
			var dcrc, acrc uint32
			if derr == nil {
				dcrc = crc32c(dec)
			}
			if aerr == nil {
				acrc = crc32c(f32Bytes(acc))
			}
			lines = append(lines, fmt.Sprintf("case=%s part=%s kind=%s pos=%d val=%d dec=%s acc=%s deccrc=%d acccrc=%d label=%s",
				c.name, k.part, k.kind, k.pos, k.val, qverdict(derr), qverdict(aerr), dcrc, acrc,
				strings.ReplaceAll(k.label, " ", "_")))
		}
	}
	g.add("corrupt", []byte(strings.Join(lines, "\n")+"\n"))
	// accumulate chains: every mix message (and every b2048 one) folded in
	// order into one accumulator, from stored initial values (NaNs where
	// the messages have NaNs, infinities of the other sign, -0, values
	// near the float32 limit) and from first = true
	for _, chain := range []struct {
		name   string
		prefix string
		n      int
	}{{"chain_mix", "mix_", 421}, {"chain_b2048", "b2048_", 7145}} {
		var names []string
		for _, c := range quantCases() {
			if strings.HasPrefix(c.name, chain.prefix) {
				names = append(names, c.name)
			}
		}
		init := make([]float32, chain.n)
		r := qsplitmix{uint64(chain.n)}
		for i := range init {
			init[i] = float32(int(r.next()%20001)-10000) / 64
		}
		for _, i := range []int{3*64 + 5, 3*64 + 9, 2048 + 100} {
			if i < chain.n {
				init[i] = math.Float32frombits(0x7F800123 + uint32(i))
			}
		}
		for _, i := range []int{4*64 + 10, 3*2048 + 1000} {
			if i < chain.n {
				init[i] = float32(math.Inf(1))
			}
		}
		init[1] = float32(math.Copysign(0, -1))
		init[2] = 3.4e38
		init[3] = -3.4e38
		g.add(chain.name+"/meta", fmt.Appendf(nil, "n=%d msgs=%s", chain.n, strings.Join(names, ",")))
		g.add(chain.name+"/init", f32Bytes(init))
		for _, first := range []bool{false, true} {
			acc := append([]float32{}, init...)
			for i, name := range names {
				if err := quant.Accumulate(acc, msgs[name].main, msgs[name].exact, first && i == 0); err != nil {
					t.Fatalf("%s: %s: %v", chain.name, name, err)
				}
			}
			tag := "out"
			if first {
				tag = "out_first"
			}
			g.add(chain.name+"/"+tag, f32Bytes(acc))
		}
	}
	return g.buf.Bytes()
}

func TestWriteQuantGolden(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_GOLDEN") != "1" {
		t.Skip("set ZIPCCL_WRITE_GOLDEN=1 to rewrite " + quantGoldenPath)
	}
	data := buildQuantGolden(t)
	if err := os.MkdirAll(filepath.Dir(quantGoldenPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(quantGoldenPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", quantGoldenPath, len(data))
}

func TestQuantGoldenUpToDate(t *testing.T) {
	want, err := os.ReadFile(quantGoldenPath)
	if errors.Is(err, os.ErrNotExist) {
		t.Skip(quantGoldenPath + " not present")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := buildQuantGolden(t); !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: package quant now writes different bytes; regenerate with "+
			"ZIPCCL_WRITE_GOLDEN=1 go test -run TestWriteQuantGolden ./cuda/gotest/ and rerun make test-cuda-emu", quantGoldenPath)
	}
}

// TestQuantGoldenCoverage checks that the inputs exercise what the cases
// are meant to: exact blocks (the short last one included), all-zero
// blocks, a tiny absmax, int4 padding, several scan tiles.
func TestQuantGoldenCoverage(t *testing.T) {
	for _, c := range quantCases() {
		m := quantEncode(t, c)
		nb := quant.Blocks(c.n, c.block)
		exact, zero := 0, 0
		for b := range nb {
			switch binary.LittleEndian.Uint32(m.main[quant.HeaderLen+4*b:]) {
			case 0xFFFFFFFF:
				exact++
			case 0:
				zero++
			}
		}
		if c.mode == quant.FP8 {
			exact, zero = 0, 0
			for b := range nb {
				switch binary.LittleEndian.Uint32(m.main[quant.HeaderLen+8*b:]) {
				case 0xFFFFFFFF:
					exact++
				case 0:
					zero++
				}
			}
		}
		switch {
		case c.mode == quant.FP8 && strings.HasPrefix(c.name, "mix_"):
			// block 5's max|u| is below 2^-100 but for float16
			if want := map[bool]int{true: 2, false: 3}[c.dt == dtype.Float16]; exact != want || zero < 1 {
				t.Errorf("%s: %d exact and %d zero blocks, want %d and >= 1", c.name, exact, zero, want)
			}
		case c.mode == quant.FP8 && strings.HasPrefix(c.name, "gen_b"):
			if exact < 2 || zero < 1 || c.n%c.block == 0 {
				t.Errorf("%s: %d exact and %d zero blocks, n %d: want NaN blocks, a zero one and a tail", c.name, exact, zero, c.n)
			}
		case strings.HasPrefix(c.name, "mix_"):
			if exact != 2 || zero < 1 {
				t.Errorf("%s: %d exact and %d zero blocks, want 2 and >= 1", c.name, exact, zero)
			}
		case strings.HasPrefix(c.name, "b2048_"):
			if exact != 2 || len(m.exact) != (2048+1001)*c.dt.Size() {
				t.Errorf("%s: %d exact blocks, exact part %d bytes", c.name, exact, len(m.exact))
			}
		case strings.HasPrefix(c.name, "gen_tiles"):
			if nb <= 8192 || exact < 100 || zero < 100 {
				t.Errorf("%s: %d blocks (want > 8192: two scan tiles), %d exact, %d zero", c.name, nb, exact, zero)
			}
		}
	}
	// fp8edge_f32: each block as its comment says
	for _, c := range quantCases() {
		if c.name != "fp8edge_f32" {
			continue
		}
		m := quantEncode(t, c)
		nb := quant.Blocks(c.n, c.block)
		s := func(b int) uint32 { return binary.LittleEndian.Uint32(m.main[quant.HeaderLen+8*b:]) }
		alpha := func(b int) uint32 { return binary.LittleEndian.Uint32(m.main[quant.HeaderLen+8*b+4:]) }
		for _, b := range []int{0, 3, 5, 8} {
			if s(b) != 0xFFFFFFFF {
				t.Errorf("%s: block %d not exact", c.name, b)
			}
		}
		for _, b := range []int{1, 2, 4, 9, 10} {
			if s(b) == 0xFFFFFFFF || s(b) == 0 {
				t.Errorf("%s: block %d not coded (scale %#x)", c.name, b, s(b))
			}
		}
		if s(6) != 0 || s(7) != 0 || alpha(2) != 0 || alpha(6) == 0 {
			t.Errorf("%s: zero blocks' scales %#x %#x, α %#x (block 2), %#x (block 6)", c.name, s(6), s(7), alpha(2), alpha(6))
		}
		sub := 0
		for _, q := range m.main[quant.HeaderLen+8*nb+9*32 : quant.HeaderLen+8*nb+10*32] {
			if q&0x78 == 0 && q&7 != 0 {
				sub++
			}
		}
		if sub == 0 {
			t.Errorf("%s: block 9 has no E4M3 subnormal code", c.name)
		}
	}
	// block 5 of the float32 and bfloat16 mix cases: a tiny scale, inv
	// finite
	for _, c := range quantCases() {
		if !strings.HasPrefix(c.name, "mix_") || c.dt == dtype.Float16 || c.mode == quant.FP8 {
			continue
		}
		m := quantEncode(t, c)
		s := math.Float32frombits(binary.LittleEndian.Uint32(m.main[quant.HeaderLen+4*5:]))
		if !(s > 0 && s < 1e-37) {
			t.Errorf("%s: block 5 scale %v, want a tiny positive one", c.name, s)
		}
	}
}
