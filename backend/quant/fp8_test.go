package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
)

var fp8Blocks = []int{32, 64, 128, 256, 512, 1024}

// fp8Message codes src with fp8 in blocks of block and returns the main
// and exact parts.
func fp8Message(t testing.TB, src []byte, dt dtype.DType, block int) ([]byte, []byte) {
	t.Helper()
	main := make([]byte, MainLen(FP8, len(src)/dt.Size(), block))
	exact, err := Encode(main, nil, src, dt, FP8, block)
	require.NoError(t, err)
	return main, exact
}

// fp8Codes is block b's codes and its s and α.
func fp8Codes(main []byte, numel, block, b int) (codes []byte, s, alpha float32) {
	nb := Blocks(numel, block)
	sc := main[HeaderLen+8*b:]
	codes = main[HeaderLen+8*nb+b*block : HeaderLen+8*nb+(b+1)*block]
	return codes, math.Float32frombits(binary.LittleEndian.Uint32(sc)), math.Float32frombits(binary.LittleEndian.Uint32(sc[4:]))
}

// relL2 is ||got - want|| / ||want|| in float64.
func relL2(got, want []float32) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - float64(w)
		num, den = num+d*d, den+float64(w)*float64(w)
	}
	return math.Sqrt(num / den)
}

// The digest's three distributions, each at scales 1, 1e-2 and 1e-5:
// round-trip relative L2 error at most 0.03 (B = 256), and no block
// collapses (each block's own error stays that of the whole).
func TestFP8RoundTripError(t *testing.T) {
	const numel, row = 1 << 15, 1024
	dists := map[string]func(rng *rand.Rand, xs []float32){
		"gauss": func(rng *rand.Rand, xs []float32) {
			for i := range xs {
				xs[i] = float32(rng.NormFloat64())
			}
		},
		"gauss+0.1%x50": func(rng *rand.Rand, xs []float32) {
			for i := range xs {
				xs[i] = float32(rng.NormFloat64())
				if rng.IntN(1000) == 0 {
					xs[i] *= 50
				}
			}
		},
		"laplace,lognormal rows": func(rng *rand.Rand, xs []float32) {
			for r := 0; r < len(xs); r += row {
				scale := math.Exp(rng.NormFloat64())
				for i := r; i < r+row; i++ {
					xs[i] = float32(rng.ExpFloat64() * scale * float64(1-2*rng.IntN(2)))
				}
			}
		},
	}
	for name, fill := range dists {
		for _, scale := range []float64{1, 1e-2, 1e-5} {
			for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
				rng := rand.New(rand.NewPCG(7, uint64(scale*1e6)))
				xs := make([]float32, numel)
				fill(rng, xs)
				for i := range xs {
					xs[i] *= float32(scale)
				}
				src := put(dt, xs)
				in := get(dt, src)
				main, exact := fp8Message(t, src, dt, 256)
				require.Empty(t, exact)
				dst := make([]byte, len(src))
				require.NoError(t, Decode(dst, main, exact, dt))
				out := get(dt, dst)
				e := relL2(out, in)
				t.Logf("%s scale %g %v: relative L2 error %.4f", name, scale, dt, e)
				require.LessOrEqual(t, e, 0.03, "%s scale %g %v", name, scale, dt)
				for b := 0; b < numel; b += 256 {
					require.LessOrEqual(t, relL2(out[b:b+256], in[b:b+256]), 0.06, "%s scale %g %v block %d", name, scale, dt, b/256)
				}
			}
		}
	}
}

// The codes and s do not depend on α (so neither on τ nor ε): coding
// 2^k x gives the same codes and exactly 2^k s, for k in [-20, 20], while
// α itself does not scale (ε dominates σ for small x).
func TestFP8ScaleEquivariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
		for _, block := range fp8Blocks {
			numel := 3*block + block/2
			xs := make([]float32, numel)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64() * 1e-3)
			}
			main0, _ := fp8Message(t, put(dt, xs), dt, block)
			alphas := map[float32]bool{}
			for k := -20; k <= 20; k++ {
				ys := make([]float32, numel)
				for i, x := range xs {
					ys[i] = float32(math.Ldexp(float64(x), k))
				}
				main, _ := fp8Message(t, put(dt, ys), dt, block)
				for b := range Blocks(numel, block) {
					c0, s0, _ := fp8Codes(main0, numel, block, b)
					c, s, alpha := fp8Codes(main, numel, block, b)
					require.Equal(t, c0, c, "%v B %d k %d block %d: codes", dt, block, k, b)
					require.Equal(t, float32(math.Ldexp(float64(s0), k)), s, "%v B %d k %d block %d: s", dt, block, k, b)
					alphas[alpha] = true
				}
			}
			require.Greater(t, len(alphas), 10, "α travels, and varies with the scale")
		}
	}
}

// τ and ε change α and nothing else on the wire.
func TestFP8TauAndEpsilonOnlyChangeAlpha(t *testing.T) {
	defer func(tau, eps float32) { fp8Tau, fp8Eps = tau, eps }(fp8Tau, fp8Eps)
	rng := rand.New(rand.NewPCG(4, 4))
	xs := make([]float32, 5*256+17)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * math.Pow(10, float64(-i/256)))
	}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
		src := put(dt, xs)
		main0, _ := fp8Message(t, src, dt, 256)
		for _, te := range [][2]float32{{1, 1e-6}, {448, 1e-2}, {57344, 0}, {3, 1e-30}} {
			fp8Tau, fp8Eps = te[0], te[1]
			main, _ := fp8Message(t, src, dt, 256)
			for b := range Blocks(len(xs), 256) {
				c0, s0, a0 := fp8Codes(main0, len(xs), 256, b)
				c, s, a := fp8Codes(main, len(xs), 256, b)
				require.Equal(t, c0, c, "%v τ %v ε %v block %d: codes", dt, te[0], te[1], b)
				require.Equal(t, s0, s, "%v τ %v ε %v block %d: s", dt, te[0], te[1], b)
				require.NotEqual(t, a0, a, "%v τ %v ε %v block %d: α", dt, te[0], te[1], b)
			}
			fp8Tau, fp8Eps = 448, 1e-6
		}
	}
}

// H(Hx) = Bx within float32 rounding; every nonzero block holds a ±448
// code; an all-zero block has s = 0 and decodes to +0, never NaN.
func TestFP8Transform(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, block := range fp8Blocks {
		u := make([]float32, block)
		x := make([]float32, block)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			u[i] = x[i]
		}
		fwht(u)
		fwht(u)
		var norm float64
		for _, v := range x {
			norm += float64(v) * float64(v)
		}
		for i := range u {
			require.InDelta(t, float64(x[i])*float64(block), float64(u[i]), float64(block)*math.Sqrt(norm)*1e-6, "B %d element %d", block, i)
		}
		for _, dt := range floats {
			xs := make([]float32, 3*block)
			for i := range block {
				xs[i] = float32(rng.NormFloat64())
				xs[2*block+i] = float32(rng.NormFloat64() * 1e-4)
			}
			src := put(dt, xs)
			main, _ := fp8Message(t, src, dt, block)
			for b := range 3 {
				codes, s, _ := fp8Codes(main, len(xs), block, b)
				if b == 1 {
					require.Zero(t, s, "zero block")
					require.Equal(t, make([]byte, block), codes)
					continue
				}
				n448 := 0
				for _, c := range codes {
					if c == 0x7E || c == 0xFE {
						n448++
					}
				}
				require.Positive(t, n448, "%v B %d block %d holds a ±448 code", dt, block, b)
			}
			dst := make([]byte, len(src))
			require.NoError(t, Decode(dst, main, nil, dt))
			for i, v := range get(dt, dst)[block : 2*block] {
				require.Equal(t, uint32(0), math.Float32bits(v), "%v B %d element %d of the zero block", dt, block, i)
			}
		}
	}
}

// A short last block is as accurate as a whole one: all B codes of its
// transform travel (TACO's code keeps only the first m, which loses
// information).
func TestFP8TailBlockAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, block := range []int{32, 256, 1024} {
		for _, m := range []int{1, 5, block/2 + 3, block - 1} {
			var full, tail float64
			for range 200 {
				xs := make([]float32, block+m)
				for i := range xs {
					xs[i] = float32(rng.NormFloat64())
				}
				src := put(dtype.Float32, xs)
				main, exact := fp8Message(t, src, dtype.Float32, block)
				dst := make([]byte, len(src))
				require.NoError(t, Decode(dst, main, exact, dtype.Float32))
				out := get(dtype.Float32, dst)
				full += relL2(out[:block], xs[:block])
				tail += relL2(out[block:], xs[block:])
			}
			require.LessOrEqual(t, tail, 1.25*full, "B %d tail of %d: mean error %.4f against a whole block's %.4f", block, m, tail/200, full/200)
		}
	}
}

// Blocks that cannot be coded travel exact, bit for bit: NaN, Inf, a
// transform that overflows float32, and a transform below 2^-100. Σx²
// overflowing float32 gives α = 0 and codes normally.
func TestFP8ExactBlocks(t *testing.T) {
	const block = 64
	fills := []func(xs []float32){
		func(xs []float32) { xs[3] = float32(math.NaN()) },
		func(xs []float32) { xs[60] = float32(math.Inf(-1)) },
		func(xs []float32) {
			for i := range xs {
				xs[i] = 3e37
			}
		},
		func(xs []float32) {
			for i := range xs {
				xs[i] = 1e-35 * float32(i%3)
			}
		},
	}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
		xs := make([]float32, (len(fills)+1)*block+9)
		rng := rand.New(rand.NewPCG(1, 1))
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		for b, f := range fills {
			f(xs[b*block : (b+1)*block])
		}
		last := xs[len(fills)*block:]
		for i := range last {
			last[i] = 1e20 * float32(1+i%5) // Σx² overflows; the transform does not
		}
		src := put(dt, xs)
		main, exact := fp8Message(t, src, dt, block)
		h, err := PeekHeader(main)
		require.NoError(t, err)
		require.Equal(t, len(fills), h.Exact, "%v", dt)
		dst := make([]byte, len(src))
		require.NoError(t, Decode(dst, main, exact, dt))
		es := dt.Size()
		require.Equal(t, src[:len(fills)*block*es], dst[:len(fills)*block*es], "%v: exact blocks bit for bit", dt)
		_, s, alpha := fp8Codes(main, len(xs), block, len(fills))
		require.Zero(t, alpha, "%v: Σx² overflows", dt)
		require.Positive(t, s)
		in, out := get(dt, src), get(dt, dst)
		require.LessOrEqual(t, relL2(out[len(fills)*block:], in[len(fills)*block:]), 0.03, "%v", dt)
	}
}

// A float32 message decoded into bfloat16 or float16 is rounded once: the
// float32 decode, then a cast. Accumulate adds the float32 decode.
func TestFP8DecodeNarrowAndAccumulate(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 9))
	xs := make([]float32, 1000)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	src := put(dtype.Float32, xs)
	main, exact := fp8Message(t, src, dtype.Float32, 128)
	wide := make([]byte, len(src))
	require.NoError(t, Decode(wide, main, exact, dtype.Float32))
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		got := make([]byte, len(xs)*dt.Size())
		require.NoError(t, Decode(got, main, exact, dt))
		require.Equal(t, put(dt, get(dtype.Float32, wide)), got, "%v", dt)
	}
	acc := make([]float32, len(xs))
	for i := range acc {
		acc[i] = 0.5
	}
	require.NoError(t, Accumulate(acc, main, exact, false))
	for i, v := range get(dtype.Float32, wide) {
		require.Equal(t, 0.5+v, acc[i], "element %d", i)
	}
	require.NoError(t, Accumulate(acc, main, exact, true))
	require.Equal(t, get(dtype.Float32, wide), acc)
}

func TestFP8CorruptMessages(t *testing.T) {
	xs := make([]float32, 300)
	for i := range xs {
		xs[i] = float32(i%17) - 8
	}
	src := put(dtype.BFloat16, xs)
	main, exact := fp8Message(t, src, dtype.BFloat16, 64)
	dst := make([]byte, len(src))
	require.NoError(t, Decode(dst, main, exact, dtype.BFloat16))
	nb := Blocks(300, 64)
	codes := HeaderLen + 8*nb
	for name, mut := range map[string]func(m []byte){
		"NaN code 0x7F":    func(m []byte) { m[codes+17] = 0x7F },
		"NaN code 0xFF":    func(m []byte) { m[len(m)-1] = 0xFF },
		"negative alpha":   func(m []byte) { m[HeaderLen+8+7] |= 0x80 },
		"NaN alpha":        func(m []byte) { binary.LittleEndian.PutUint32(m[HeaderLen+12:], 0x7FC00000) },
		"scale too large":  func(m []byte) { binary.LittleEndian.PutUint32(m[HeaderLen:], 0x7B124925) },
		"block 2048":       func(m []byte) { m[5] = 11 },
		"mode 4":           func(m []byte) { m[3] = 4 },
		"exact mark added": func(m []byte) { binary.LittleEndian.PutUint32(m[HeaderLen+16:], exactScale) },
	} {
		m := append([]byte{}, main...)
		mut(m)
		err := Decode(dst, m, exact, dtype.BFloat16)
		require.Truef(t, errors.Is(err, ErrCorrupt), "%s: %v", name, err)
		require.Truef(t, errors.Is(Accumulate(make([]float32, 300), m, exact, true), ErrCorrupt), "%s", name)
	}
	m := append([]byte{}, main...)
	binary.LittleEndian.PutUint32(m[HeaderLen:], 0x7B124924) // the largest scale is accepted
	require.NoError(t, Decode(dst, m, exact, dtype.BFloat16))
	_, err := Encode(make([]byte, MainLen(FP8, 300, 2048)), nil, src, dtype.BFloat16, FP8, 2048)
	require.ErrorContains(t, err, "want a power of two from 32 to 1024")
}

// The portable E4M3 rounding this package uses is torch's: checked here on
// the rounding boundaries (midpoints between codes, ±1 ulp) of every code.
func TestFP8E4M3Midpoints(t *testing.T) {
	for c := range 0x7E {
		lo, hi := float64(dtype.E4M3FNToF32(uint8(c))), float64(dtype.E4M3FNToF32(uint8(c+1)))
		mid := float32((lo + hi) / 2)
		want := uint8(c)
		if c%2 == 1 {
			want = uint8(c + 1) // ties to even
		}
		require.Equal(t, want, dtype.F32ToE4M3FN(mid), fmt.Sprintf("midpoint %v", mid))
		require.Equal(t, uint8(c), dtype.F32ToE4M3FN(math.Nextafter32(mid, 0)))
		require.Equal(t, uint8(c+1), dtype.F32ToE4M3FN(math.Nextafter32(mid, 500)))
	}
	require.Equal(t, uint8(0x7E), dtype.F32ToE4M3FN(464), "a tie above 448 goes to 448 (even)")
	require.Equal(t, uint8(0xFE), dtype.F32ToE4M3FN(-470), "saturates")
}
