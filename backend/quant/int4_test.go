package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
)

// int4 codes are packed two per byte, element 2k in the high nibble;
// +absmax and -absmax map to exactly +7 and -7 (no clipping).
func TestInt4AbsmaxAndNibbleOrder(t *testing.T) {
	for _, dt := range floats {
		xs := []float32{0.875, -0.875, 0.375, 0, -0.125}
		main, _, dst := roundTripMode(t, put(dt, xs), dt, Int4, 32)
		require.Equal(t, []byte{0x79, 0x30, 0xF0}, main[HeaderLen+4:], "%v: codes 7, -7, 3, 0, -1 and the padding nibble", dt)
		require.Equal(t, xs, get(dt, dst), "%v: every value is a multiple of the scale 1/8", dt)
	}
}

// Ties round to even: with absmax 7 the scale is 1 and x*inv is x.
func TestInt4RoundsTiesToEven(t *testing.T) {
	xs := []float32{7, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 6.5, -6.5}
	want := []int8{7, 0, 2, 2, 0, -2, -2, 4, 6, -6}
	for _, dt := range floats {
		main, _, _ := roundTripMode(t, put(dt, xs), dt, Int4, 32)
		codes := main[HeaderLen+4:]
		for i, w := range want {
			c := codes[i/2] >> 4
			if i%2 == 1 {
				c = codes[i/2] & 15
			}
			require.Equal(t, w, int8(c<<4)>>4, "%v: %v", dt, xs[i])
		}
	}
}

// Blocks of a message are packed back to back: a block boundary is a byte
// boundary, and an odd tail pads its last low nibble with 0.
func TestInt4BlocksAndTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]float32, 3*32+7)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	xs[40] = float32(math.Inf(1))
	src := put(dtype.BFloat16, xs)
	main, exact, dst := roundTripMode(t, src, dtype.BFloat16, Int4, 32)
	require.Len(t, main, HeaderLen+4*4+52)
	require.Len(t, exact, 64, "the Inf block travels exact")
	require.Equal(t, src[64:128], dst[64:128])
	// each block alone codes to the same bytes as its part of the whole
	for b := range 4 {
		lo, hi := 32*b, min(len(xs), 32*b+32)
		part, _, _ := roundTripMode(t, src[2*lo:2*hi], dtype.BFloat16, Int4, 32)
		require.Equal(t, main[HeaderLen+16+lo/2:HeaderLen+16+(hi+1)/2], part[HeaderLen+4:], "block %d", b)
	}
}

// A float32 message decodes into a narrower dtype as a float32 decode and
// one cast would, exact blocks included.
func TestDecodeFloat32IntoNarrower(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	xs := make([]float32, 5000)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 1e-3)
	}
	xs[4100] = float32(math.NaN())
	for _, mode := range modes {
		src := put(dtype.Float32, xs)
		main, exact, wide := roundTripMode(t, src, dtype.Float32, mode, 2048)
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
			got := make([]byte, len(xs)*2)
			require.NoError(t, Decode(got, main, exact, dt))
			require.Equal(t, put(dt, get(dtype.Float32, wide)), got, "%v into %v", mode, dt)
		}
	}
}

// Accumulate adds q*s (float32) to acc in the order called, as a reader of
// the format written here from docs/FORMAT.md gives it; NaN and infinities
// reach the sum.
func TestAccumulate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, mode := range modes {
		for _, dt := range floats {
			const numel = 4099
			acc := make([]float32, numel)
			want := make([]float32, numel)
			for k := range 3 {
				xs := make([]float32, numel)
				for i := range xs {
					xs[i] = float32(rng.NormFloat64())
				}
				if k == 1 {
					xs[2050] = float32(math.Inf(-1))
				}
				main, exact, _ := roundTripMode(t, put(dt, xs), dt, mode, 2048)
				require.NoError(t, Accumulate(acc, main, exact, k == 0))
				for i, v := range refDequant(mode, dt, main, exact, numel, 2048) {
					if k == 0 {
						want[i] = v
					} else {
						want[i] += v
					}
				}
			}
			require.Equal(t, want, acc, "%v %v", mode, dt)
			require.True(t, math.IsInf(float64(acc[2050]), -1))
		}
	}
}

// refDequant reads a message as docs/FORMAT.md describes it: per block a
// float32 scale (0xFFFFFFFF: exact) and the codes, int4 high nibble first.
func refDequant(mode Mode, dt dtype.DType, main, exact []byte, numel, block int) []float32 {
	nb := (numel + block - 1) / block
	codes := main[24+4*nb:]
	out := make([]float32, numel)
	for i := range out {
		b := i / block
		bits := binary.LittleEndian.Uint32(main[24+4*b:])
		if bits == 0xFFFFFFFF {
			continue
		}
		var q int8
		if mode == Int8 {
			q = int8(codes[i])
		} else if i%2 == 0 {
			q = int8(codes[i/2]) >> 4
		} else {
			q = int8(codes[i/2]<<4) >> 4
		}
		out[i] = float32(q) * math.Float32frombits(bits)
	}
	for b := range nb { // exact blocks, in order
		if binary.LittleEndian.Uint32(main[24+4*b:]) != 0xFFFFFFFF {
			continue
		}
		lo, hi := b*block, min(numel, (b+1)*block)
		n := (hi - lo) * dt.Size()
		copy(out[lo:hi], get(dt, exact[:n]))
		exact = exact[n:]
	}
	return out
}

func TestInt4Corrupt(t *testing.T) {
	xs := []float32{1, -2, 3, 4, 5}
	src := put(dtype.Float32, xs)
	main := make([]byte, MainLen(Int4, 5, 32))
	_, err := Encode(main, nil, src, dtype.Float32, Int4, 32)
	require.NoError(t, err)
	dst := make([]byte, len(src))
	acc := make([]float32, 5)
	for what, mut := range map[string]func(m []byte){
		"code -8 high": func(m []byte) { m[HeaderLen+4] = 0x80 | m[HeaderLen+4]&15 },
		"code -8 low":  func(m []byte) { m[HeaderLen+5] = m[HeaderLen+5]&0xF0 | 8 },
		"padding":      func(m []byte) { m[HeaderLen+6] |= 1 },
		"mode":         func(m []byte) { m[3] = 3 },
	} {
		m := append([]byte{}, main...)
		mut(m)
		require.Truef(t, errors.Is(Decode(dst, m, nil, dtype.Float32), ErrCorrupt), "%s", what)
		require.Truef(t, errors.Is(Accumulate(acc, m, nil, false), ErrCorrupt), "%s", what)
	}
	require.Error(t, Decode(make([]byte, 10), main, nil, dtype.Int16), "float32 decodes into floats only")
}

func FuzzAccumulate(f *testing.F) {
	for _, mode := range modes {
		src := put(dtype.Float16, []float32{1, -2, 3, float32(math.NaN()), 5})
		main := make([]byte, MainLen(mode, 5, 32))
		exact, _ := Encode(main, nil, src, dtype.Float16, mode, 32)
		f.Add(main, exact, false)
	}
	f.Fuzz(func(t *testing.T, m, e []byte, first bool) {
		h, err := PeekHeader(m)
		if err != nil || h.Numel > 1<<16 {
			return
		}
		_ = Accumulate(make([]float32, h.Numel), m, e, first) // must not panic
	})
}

// The AVX2 routines give the portable code's bytes and sums, on random
// values, rounding ties and float16 subnormals, every dtype and mode.
func TestSIMDMatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this machine: the portable code is what runs")
	}
	defer func() { useAVX2 = true }()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, mode := range modes {
		for _, dt := range floats {
			for _, numel := range []int{31, 32, 33, 2048, 2048 + 77, 3*2048 - 1} {
				xs := make([]float32, numel)
				for i := range xs {
					switch i % 5 {
					case 0:
						xs[i] = float32(rng.IntN(15)-7) + 0.5 // ties when absmax is 7 or 127
					case 1:
						xs[i] = float32(rng.NormFloat64() * 1e-6) // float16 subnormals
					default:
						xs[i] = float32(rng.NormFloat64())
					}
				}
				xs[0] = float32(mode.qmax())
				src := put(dt, xs)
				var mains [2][]byte
				var accs [2][]float32
				for k, simd := range []bool{true, false} {
					useAVX2 = simd
					mains[k] = make([]byte, MainLen(mode, numel, 2048))
					exact, err := Encode(mains[k], nil, src, dt, mode, 2048)
					require.NoError(t, err)
					accs[k] = make([]float32, numel)
					for i := range accs[k] {
						accs[k][i] = float32(i) * 0.25
					}
					require.NoError(t, Accumulate(accs[k], mains[k], exact, false))
					require.NoError(t, Accumulate(accs[k], mains[k], exact, false))
					first := make([]float32, numel)
					require.NoError(t, Accumulate(first, mains[k], exact, true))
					accs[k] = append(accs[k], first...)
				}
				require.Equal(t, mains[1], mains[0], "%v %v numel %d: codes", mode, dt, numel)
				require.Equal(t, accs[1], accs[0], "%v %v numel %d: sums", mode, dt, numel)
			}
		}
	}
}

// validCodes finds a code -8 in any nibble of any byte, and nothing else.
func TestValidCodesInt4(t *testing.T) {
	for n := range 20 {
		for pos := range 2 * n {
			codes := make([]byte, n)
			for i := range codes {
				codes[i] = byte(i*37) & 0x77 // no nibble 8
			}
			require.True(t, validCodes(Int4, codes), "n %d", n)
			if pos%2 == 0 {
				codes[pos/2] = codes[pos/2]&15 | 0x80
			} else {
				codes[pos/2] = codes[pos/2]&0xF0 | 8
			}
			require.False(t, validCodes(Int4, codes), "n %d nibble %d", n, pos)
		}
	}
	all := make([]byte, 0, 256)
	for c := range 256 {
		if c>>4 != 8 && c&15 != 8 {
			all = append(all, byte(c))
		}
	}
	require.True(t, validCodes(Int4, all))
}

// A block whose absmax is below Q / MaxFloat32 (inv would overflow)
// travels exact, on the SIMD and the portable path; one just above it is
// coded and decodes.
func TestTinyBlocksTravelExact(t *testing.T) {
	defer func(old bool) { useAVX2 = old }(useAVX2)
	for _, simd := range []bool{false, useAVX2} {
		useAVX2 = simd
		for _, mode := range modes {
			for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
				xs := make([]float32, 64)
				for k := range 32 {
					xs[k] = float32(k-16) * 1e-38 / 16
					xs[32+k] = float32(k-16) * 4e-37 / 16
				}
				src := put(dt, xs)
				main, exact, dst := roundTripMode(t, src, dt, mode, 32)
				require.Equal(t, uint32(0xFFFFFFFF), binary.LittleEndian.Uint32(main[HeaderLen:]), "%v %v simd=%v", mode, dt, simd)
				require.Equal(t, src[:32*dt.Size()], exact)
				require.Equal(t, src[:32*dt.Size()], dst[:32*dt.Size()])
				require.NotEqual(t, uint32(0xFFFFFFFF), binary.LittleEndian.Uint32(main[HeaderLen+4:]))
			}
		}
	}
}
