package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
)

// fp8Outputs is everything the fp8 coding of one input gives: the message,
// its decodings (into the message's dtype, and a float32 message's into
// bfloat16 and float16 too) and accumulations, float32 sums as bits so that
// NaNs compare.
type fp8Outputs struct {
	main, exact []byte
	decoded     [][]byte
	sums        []uint32
}

// fp8Run codes src with useAVX2 set to simd and decodes and accumulates
// the message.
func fp8Run(t *testing.T, simd bool, src []byte, dt dtype.DType, block int) fp8Outputs {
	t.Helper()
	defer func(old bool) { useAVX2 = old }(useAVX2)
	useAVX2 = simd
	numel := len(src) / dt.Size()
	var o fp8Outputs
	o.main = make([]byte, MainLen(FP8, numel, block))
	exact, err := Encode(o.main, nil, src, dt, FP8, block)
	require.NoError(t, err)
	o.exact = exact
	o.decoded = fp8Decodings(t, o.main, o.exact, dt, numel)
	o.sums = fp8Sums(t, o.main, o.exact, numel)
	return o
}

func fp8Decodings(t *testing.T, main, exact []byte, dt dtype.DType, numel int) [][]byte {
	t.Helper()
	into := []dtype.DType{dt}
	if dt == dtype.Float32 {
		into = floats
	}
	var out [][]byte
	for _, d := range into {
		dst := make([]byte, numel*d.Size())
		require.NoError(t, Decode(dst, main, exact, d))
		out = append(out, dst)
	}
	return out
}

// fp8Sums accumulates the message twice onto values that include NaNs with
// payloads (the sum's NaN must be the accumulator's), then once with first.
func fp8Sums(t *testing.T, main, exact []byte, numel int) []uint32 {
	t.Helper()
	acc := make([]float32, numel)
	for i := range acc {
		acc[i] = float32(i%19) * 0.37
		if i%23 == 5 {
			acc[i] = math.Float32frombits(0x7FC00000 | uint32(i)) // a NaN with a payload
		}
	}
	require.NoError(t, Accumulate(acc, main, exact, false))
	require.NoError(t, Accumulate(acc, main, exact, false))
	first := make([]float32, numel)
	require.NoError(t, Accumulate(first, main, exact, true))
	var bits []uint32
	for _, v := range append(acc, first...) {
		bits = append(bits, math.Float32bits(v))
	}
	return bits
}

func fp8Same(t *testing.T, src []byte, dt dtype.DType, block int, what string) fp8Outputs {
	t.Helper()
	s, p := fp8Run(t, true, src, dt, block), fp8Run(t, false, src, dt, block)
	require.Equal(t, p.main, s.main, "%s: main part", what)
	require.Equal(t, p.exact, s.exact, "%s: exact part", what)
	for k := range p.decoded {
		require.Equal(t, p.decoded[k], s.decoded[k], "%s: decoding %d", what, k)
	}
	require.Equal(t, p.sums, s.sums, "%s: sums", what)
	return s
}

// fp8TestBlock fills xs (one block, or a short last one) with one of the
// kinds of block the coding treats apart.
func fp8TestBlock(rng *rand.Rand, xs []float32, kind int) {
	switch kind {
	case 0: // activations: normal, of a random scale
		sc := math.Exp(rng.NormFloat64() * 3)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * sc)
		}
	case 1: // heavy tails and exact zeros
		for i := range xs {
			if rng.IntN(4) == 0 {
				xs[i] = 0
			} else {
				xs[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*2))
			}
		}
	case 2: // zero
		clear(xs)
	case 3: // a NaN or an infinity among values
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		xs[rng.IntN(len(xs))] = [...]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(3)]
	case 4: // tiny: max|u| below 2^-100 (float32, bfloat16; float16 rounds it to 0)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * 1e-36)
		}
	case 5: // about 2^-100 after the transform: either side of fp8Tiny
		sc := math.Ldexp(1, -100) / float64(len(xs)) * (0.5 + rng.Float64())
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * sc)
		}
	case 6: // huge: the transform (and the squares) overflow
		for i := range xs {
			xs[i] = float32((1 + rng.Float64()) * 1.5e38)
		}
	case 7: // squares overflow (α 0), the transform does not
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * 1e20)
		}
	case 8: // huge of both signs: Inf - Inf in the transform
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * 1e38)
		}
	case 9: // small integers: many equal |u|, signed zeros in u
		for i := range xs {
			xs[i] = float32(rng.IntN(5) - 2)
		}
	}
}

const fp8Kinds = 10

// The AVX2 path gives the portable path's main part, exact part, decoded
// bytes and float32 sums bit for bit: every block size, every dtype,
// lengths with short tails, and every kind of block.
func TestFP8SIMDMatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this machine (or a purego build): the portable code is what runs")
	}
	rng := rand.New(rand.NewPCG(81, 82))
	for b := 32; b <= 1024; b *= 2 {
		for _, dt := range floats {
			for _, numel := range []int{1, 17, b - 1, b, b + 5, 4*b + b/2 + 3, fp8Kinds*b - 9} {
				xs := make([]float32, numel)
				for lo := 0; lo < numel; lo += b {
					fp8TestBlock(rng, xs[lo:min(numel, lo+b)], rng.IntN(fp8Kinds))
				}
				if numel >= fp8Kinds*b-9 { // every kind once, in order
					for k := range fp8Kinds {
						fp8TestBlock(rng, xs[k*b:min(numel, (k+1)*b)], k)
					}
				}
				fp8Same(t, put(dt, xs), dt, b, fmt.Sprintf("B %d %v numel %d", b, dt, numel))
			}
		}
	}
}

// The blocks of TestFP8SIMDMatchesPortable are what they claim: some exact
// (NaN, Inf, tiny, overflowing transform), zero, α 0, coded.
func TestFP8SIMDBlockKinds(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const b = 256
	xs := make([]float32, fp8Kinds*b)
	for k := range fp8Kinds {
		fp8TestBlock(rng, xs[k*b:(k+1)*b], k)
	}
	o := fp8Same(t, put(dtype.Float32, xs), dtype.Float32, b, "kinds")
	scale := func(k int) uint32 { return binary.LittleEndian.Uint32(o.main[HeaderLen+8*k:]) }
	alpha := func(k int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(o.main[HeaderLen+8*k+4:])) }
	for _, k := range []int{3, 4, 6, 8} {
		require.Equal(t, uint32(exactScale), scale(k), "kind %d travels exact", k)
	}
	require.Equal(t, uint32(0), scale(2), "zero block: s 0")
	for _, k := range []int{0, 1, 7, 9} {
		require.NotEqual(t, uint32(exactScale), scale(k), "kind %d is coded", k)
	}
	require.Zero(t, alpha(7), "squares overflow: α 0")
}

// fp8Ties is a float32 block x = H u whose transform, computed by the
// encoder, is exactly B·u, u holding ±448 (so that u's codes are E4M3(u))
// and many E4M3 midpoints, normal and subnormal: each must round to even.
// u's entries are multiples of 2^-10 and Σ|u| < 2^14, so every partial sum
// of either transform is exact in float32.
func fp8Ties(rng *rand.Rand, b int) []float32 {
	u := make([]float64, b)
	sign := func() float64 { return float64(1 - 2*rng.IntN(2)) }
	for i := range u {
		switch {
		case i == 0:
			u[i] = 448 * sign()
		case i%37 == 1: // a normal midpoint, 2^e (1 + (2m+1)/16), below 448
			e := rng.IntN(15) - 6
			m := rng.IntN(8)
			if e == 8 {
				m = rng.IntN(6)
			}
			u[i] = sign() * math.Ldexp(1+float64(2*m+1)/16, e)
		case i%3 == 0: // a subnormal midpoint, (k + 1/2) 2^-9
			u[i] = sign() * math.Ldexp(float64(2*rng.IntN(8)+1), -10)
		case i%3 == 1: // an E4M3 value, or zero
			u[i] = sign() * float64(dtype.E4M3FNToF32(uint8(rng.IntN(0x3F))))
		default: // any multiple of 2^-10 below 2^-6
			u[i] = sign() * math.Ldexp(float64(rng.IntN(16)), -10)
		}
	}
	// x = H u in float64 (exact), then float32 (exact: multiples of 2^-10
	// below 2^14)
	for h := 1; h < b; h *= 2 {
		for j := 0; j < b; j += 2 * h {
			for i := j; i < j+h; i++ {
				u[i], u[i+h] = u[i]+u[i+h], u[i]-u[i+h]
			}
		}
	}
	xs := make([]float32, b)
	for i, v := range u {
		xs[i] = float32(v)
		if float64(xs[i]) != v {
			panic("fp8Ties: inexact")
		}
	}
	return xs
}

// E4M3 ties: both paths give the same codes, and those codes are
// E4M3(u) exactly, ties to even, subnormal ones too.
func TestFP8SIMDTies(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for b := 32; b <= 1024; b *= 2 {
		for range 4 {
			xs := fp8Ties(rng, b)
			o := fp8Same(t, put(dtype.Float32, xs), dtype.Float32, b, fmt.Sprintf("ties B %d", b))
			// the codes are E4M3 of u = Hx / B, exactly
			u := make([]float32, b)
			copy(u, xs)
			fwht(u)
			codes := o.main[HeaderLen+8:]
			ties := 0
			for i, v := range u {
				w := v / float32(b)
				require.Equal(t, dtype.F32ToE4M3FN(w), codes[i], "B %d element %d: %v", b, i, w)
				if lo := dtype.E4M3FNToF32(codes[i] &^ 0x80); lo != abs32(w) {
					ties++
				}
			}
			require.Greater(t, ties, b/4, "B %d: ties", b)
		}
	}
}

// The float16 and bfloat16 paths with ties where they can hold them: the
// same bytes either way.
func TestFP8SIMDTiesNarrow(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		for b := 32; b <= 1024; b *= 2 {
			xs := make([]float32, 3*b)
			for k := range 3 {
				copy(xs[k*b:], fp8Ties(rng, b))
			}
			fp8Same(t, put(dt, xs), dt, b, fmt.Sprintf("ties %v B %d", dt, b))
		}
	}
}

// Decoding and accumulating arbitrary codes (any but the NaN ones: every
// E4M3 subnormal and normal value) with random scales: the same bytes and
// sums either way.
func TestFP8SIMDDecodesAnyCodes(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	defer func(old bool) { useAVX2 = old }(useAVX2)
	rng := rand.New(rand.NewPCG(3, 4))
	for b := 32; b <= 1024; b *= 2 {
		for _, dt := range floats {
			for _, numel := range []int{b, 3*b - 7, 2*b + 16} {
				src := put(dt, make([]float32, numel))
				main := make([]byte, MainLen(FP8, numel, b))
				_, err := Encode(main, nil, src, dt, FP8, b)
				require.NoError(t, err)
				nb := Blocks(numel, b)
				for k := range nb {
					s := float32(math.Ldexp(1+rng.Float64(), rng.IntN(200)-100))
					if k == 0 {
						s = math.MaxFloat32 / 448 // the largest a decoder takes
					}
					bits := math.Float32bits(s)
					for j := range 4 {
						main[HeaderLen+8*k+j] = byte(bits >> (8 * j))
					}
				}
				codes := main[HeaderLen+8*nb:]
				for i := range codes {
					c := byte(rng.IntN(256))
					if c&0x7F == 0x7F {
						c = byte(i) &^ 1 // every code at least once: 0x00..0x7E, 0x80..0xFE
					}
					codes[i] = c
				}
				for i := 0; i < len(codes) && i < 256; i++ {
					if byte(i)&0x7F != 0x7F {
						codes[i] = byte(i)
					}
				}
				var dec [2][][]byte
				var sums [2][]uint32
				for k, simd := range []bool{true, false} {
					useAVX2 = simd
					dec[k] = fp8Decodings(t, main, nil, dt, numel)
					sums[k] = fp8Sums(t, main, nil, numel)
				}
				for k := range dec[1] {
					require.Equal(t, dec[1][k], dec[0][k], "B %d %v numel %d: decoding %d", b, dt, numel, k)
				}
				require.Equal(t, sums[1], sums[0], "B %d %v numel %d: sums", b, dt, numel)
			}
		}
	}
}

// e4m3SIMD is dtype.F32ToE4M3FN(v * inv), bit for bit: every float32 in a
// dense sweep of [-500, 500] (every 89th bit pattern, from two starts),
// every E4M3 midpoint and value and their neighbours, the saturation and
// special values, and products with inv.
func TestE4M3SIMD(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	check := func(xs []float32, inv float32) {
		t.Helper()
		got := make([]byte, len(xs))
		require.Equal(t, len(xs), e4m3SIMD(got, xs, inv))
		for i, x := range xs {
			if want := dtype.F32ToE4M3FN(x * inv); got[i] != want {
				t.Fatalf("E4M3(%v * %v) (bits %#x): got %#x, want %#x", x, inv, math.Float32bits(x), got[i], want)
			}
		}
	}
	limit := math.Float32bits(500)
	xs := make([]float32, 0, 1<<16)
	for _, start := range []uint32{0, 44} {
		for b := start; b <= limit; b += 89 {
			xs = append(xs, math.Float32frombits(b), math.Float32frombits(b|1<<31))
			if len(xs) == cap(xs) {
				check(xs, 1)
				xs = xs[:0]
			}
		}
	}
	for c := range 0x7F {
		v := dtype.E4M3FNToF32(uint8(c))
		next := float32(480) // past 448 the next step would be 480
		if c < 0x7E {
			next = dtype.E4M3FNToF32(uint8(c + 1))
		}
		mid := (v + next) / 2 // exact: float32 has bits to spare
		for _, w := range []float32{v, mid} {
			b := math.Float32bits(w)
			for d := uint32(0); d <= 4; d++ {
				for _, x := range []uint32{b + d, b - d} {
					xs = append(xs, math.Float32frombits(x), math.Float32frombits(x|1<<31))
				}
			}
		}
	}
	for _, v := range []float32{0, 1e-45, 1e-40, 1.1754942e-38, 2e-38, 1.0 / 1024, 3.0 / 2048, 448, 449, 463.99997, 464, 464.00003,
		479.99997, 480, 480.00003, 1e10, math.MaxFloat32, float32(math.Inf(1)), float32(math.NaN()),
		math.Float32frombits(0x7F800001), math.Float32frombits(0x7FBFFFFF)} {
		xs = append(xs, v, -v)
	}
	for len(xs)%32 != 0 {
		xs = append(xs, 0.75)
	}
	check(xs, 1)
	rng := rand.New(rand.NewPCG(1, 1))
	ys := make([]float32, 1<<16)
	for range 8 {
		m := float32(math.Exp(rng.NormFloat64() * 10))
		for i := range ys {
			ys[i] = (2*rng.Float32() - 1) * m
		}
		ys[0] = m
		check(ys, float32(fp8Max/m))
	}
}
