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

var floats = []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16}

func put(dt dtype.DType, xs []float32) []byte {
	b := make([]byte, len(xs)*dt.Size())
	narrow(dt, b, xs)
	return b
}

func get(dt dtype.DType, b []byte) []float32 {
	xs := make([]float32, len(b)/dt.Size())
	widen(dt, xs, b)
	return xs
}

var modes = []Mode{Int8, Int4}

func roundTrip(t *testing.T, src []byte, dt dtype.DType, block int) ([]byte, []byte, []byte) {
	t.Helper()
	return roundTripMode(t, src, dt, Int8, block)
}

func roundTripMode(t *testing.T, src []byte, dt dtype.DType, mode Mode, block int) ([]byte, []byte, []byte) {
	t.Helper()
	numel := len(src) / dt.Size()
	main := make([]byte, MainLen(mode, numel, block))
	exact, err := Encode(main, nil, src, dt, mode, block)
	require.NoError(t, err)
	h, err := PeekHeader(main)
	require.NoError(t, err)
	require.Equal(t, len(exact), h.ExactLen(main))
	dst := make([]byte, len(src))
	require.NoError(t, Decode(dst, main, exact, dt))
	return main, exact, dst
}

// halfULP is half a unit in the last place of v in dt: the rounding of
// the decoded value to the tensor's dtype.
func halfULP(dt dtype.DType, v float32) float64 {
	mant := map[dtype.DType]int{dtype.Float32: 23, dtype.BFloat16: 7, dtype.Float16: 10}[dt]
	a := math.Abs(float64(v))
	if a == 0 {
		return 0
	}
	e := math.Floor(math.Log2(a))
	if dt == dtype.Float16 {
		e = max(e, -14) // subnormals
	}
	return math.Ldexp(1, int(e)-mant-1)
}

// The error bound of the package documentation, per element, against the
// float64 value: s/2 (plus float32's own rounding) and the rounding to dt.
func TestErrorBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, mode := range modes {
		for _, dt := range floats {
			for _, numel := range []int{1, 31, 2048, 2049, 5000} {
				xs := make([]float32, numel)
				for i := range xs {
					xs[i] = float32(rng.NormFloat64() * 0.02 * math.Exp(rng.NormFloat64()))
				}
				src := put(dt, xs)
				in := get(dt, src)
				_, _, dst := roundTripMode(t, src, dt, mode, 2048)
				out := get(dt, dst)
				for b := 0; b < numel; b += 2048 {
					hi := min(numel, b+2048)
					var absmax float64
					for _, v := range in[b:hi] {
						absmax = max(absmax, math.Abs(float64(v)))
					}
					s := absmax / float64(mode.qmax())
					for i := b; i < hi; i++ {
						err := math.Abs(float64(out[i]) - float64(in[i]))
						bound := 0.5*s*(1+1e-4) + halfULP(dt, out[i])
						require.LessOrEqualf(t, err, bound, "%v %v numel %d element %d: %v -> %v", mode, dt, numel, i, in[i], out[i])
					}
				}
			}
		}
	}
}

// +absmax and -absmax map to exactly +127 and -127 (no clipping), and
// decode to within a rounding of themselves.
func TestAbsmaxMapsTo127(t *testing.T) {
	for _, dt := range floats {
		for _, absmax := range []float32{1, 0.0123, 3.3e-5, 6e4, 0.75} {
			xs := []float32{absmax, -absmax, absmax / 2, 0}
			src := put(dt, xs)
			main, _, dst := roundTrip(t, src, dt, 32)
			q := main[HeaderLen+4:]
			require.Equal(t, []byte{127, 0x81}, q[:2], "%v absmax %v", dt, absmax)
			out, in := get(dt, dst), get(dt, src)
			require.InDelta(t, float64(in[0]), float64(out[0]), halfULP(dt, in[0])+float64(in[0])*1e-6)
			require.Equal(t, out[0], -out[1])
		}
	}
}

// Ties round to even: with absmax 127 the scale is 1 and x*inv is x.
func TestRoundsTiesToEven(t *testing.T) {
	xs := []float32{127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 126.5}
	want := []int8{127, 0, 2, 2, 0, -2, -2, 4, 126}
	for _, dt := range floats {
		main, _, _ := roundTrip(t, put(dt, xs), dt, 32)
		q := main[HeaderLen+4 : HeaderLen+4+len(xs)]
		for i, w := range want {
			if dt == dtype.BFloat16 && xs[i] == 126.5 { // not a bfloat16 value
				continue
			}
			require.Equal(t, w, int8(q[i]), "%v: %v", dt, xs[i])
		}
	}
}

func TestZeroBlockAndTail(t *testing.T) {
	for _, dt := range floats {
		xs := make([]float32, 2*32+5)
		xs[40], xs[66] = 0.25, -3 // blocks 1 and 2 (the tail) hold values, block 0 none
		main, exact, dst := roundTrip(t, put(dt, xs), dt, 32)
		require.Empty(t, exact)
		require.Equal(t, uint32(0), binary.LittleEndian.Uint32(main[HeaderLen:]), "zero block: scale 0")
		out := get(dt, dst)
		for i, v := range out {
			if i != 40 && i != 66 {
				require.Zero(t, v, "%v element %d", dt, i)
			}
		}
		require.Equal(t, float32(0.25), out[40])
		require.Equal(t, float32(-3), out[66])
	}
}

// A block holding NaN or an infinity travels exact; the others do not.
func TestNonFiniteBlocksTravelExact(t *testing.T) {
	for _, dt := range floats {
		xs := make([]float32, 4*32+7)
		for i := range xs {
			xs[i] = float32(i%13) * 0.0371
		}
		xs[33] = float32(math.NaN())
		xs[4*32+2] = float32(math.Inf(-1)) // in the tail block
		src := put(dt, xs)
		main, exact, dst := roundTrip(t, src, dt, 32)
		h, err := PeekHeader(main)
		require.NoError(t, err)
		require.Equal(t, 2, h.Exact)
		require.Len(t, exact, (32+7)*dt.Size())
		es := dt.Size()
		require.Equal(t, src[32*es:64*es], dst[32*es:64*es], "%v: NaN block bit for bit", dt)
		require.Equal(t, src[128*es:], dst[128*es:], "%v: Inf block bit for bit", dt)
		require.NotEqual(t, src[:32*es], dst[:32*es], "%v: finite blocks are quantized", dt)
	}
}

// bfloat16 is read as bfloat16: values far outside float16's range keep
// their magnitude (DeepSpeed read bf16 as fp16 for years).
func TestBFloat16IsNotFloat16(t *testing.T) {
	xs := []float32{1e10, -3e9, 7e9, 2.5e10}
	src := put(dtype.BFloat16, xs)
	_, _, dst := roundTrip(t, src, dtype.BFloat16, 32)
	out, in := get(dtype.BFloat16, dst), get(dtype.BFloat16, src)
	require.InEpsilon(t, float64(in[3]), float64(out[3]), 1e-2)
	require.InEpsilon(t, float64(in[0]), float64(out[0]), 0.02)
}

func TestCorruptMessages(t *testing.T) {
	xs := make([]float32, 100)
	for i := range xs {
		xs[i] = float32(i) - 50
	}
	xs[70] = float32(math.NaN())
	src := put(dtype.Float32, xs)
	main := make([]byte, MainLen(Int8, 100, 32))
	exact, err := Encode(main, nil, src, dtype.Float32, Int8, 32)
	require.NoError(t, err)
	dst := make([]byte, len(src))
	bad := func(mut func(m, e []byte) ([]byte, []byte), what string) {
		m, e := append([]byte{}, main...), append([]byte{}, exact...)
		m, e = mut(m, e)
		err := Decode(dst, m, e, dtype.Float32)
		require.Truef(t, errors.Is(err, ErrCorrupt), "%s: %v", what, err)
	}
	bad(func(m, e []byte) ([]byte, []byte) { m[0] = 'X'; return m, e }, "magic")
	bad(func(m, e []byte) ([]byte, []byte) { m[5] = 3; return m, e }, "block size")
	bad(func(m, e []byte) ([]byte, []byte) { return m[:len(m)-1], e }, "short main")
	bad(func(m, e []byte) ([]byte, []byte) { return m, e[:len(e)-4] }, "short exact")
	bad(func(m, e []byte) ([]byte, []byte) { return m, append(e, 0) }, "long exact")
	bad(func(m, e []byte) ([]byte, []byte) { m[HeaderLen+4*4+3] = 0x80; return m, e }, "code -128")
	bad(func(m, e []byte) ([]byte, []byte) { m[HeaderLen+3] = 0xBF; return m, e }, "negative scale")
	bad(func(m, e []byte) ([]byte, []byte) { m[16] = 0; return m, e }, "exact count")
	require.Error(t, Decode(dst, main, exact, dtype.BFloat16), "wrong dtype")
	_, err = Encode(main, nil, make([]byte, 8), dtype.Int32, Int8, 32)
	require.Error(t, err, "integers are never coded lossily")
}

func FuzzDecode(f *testing.F) {
	src := put(dtype.BFloat16, []float32{1, -2, 3, float32(math.Inf(1)), 5})
	main := make([]byte, MainLen(Int8, 5, 32))
	exact, _ := Encode(main, nil, src, dtype.BFloat16, Int8, 32)
	f.Add(main, exact)
	f.Fuzz(func(t *testing.T, m, e []byte) {
		h, err := PeekHeader(m)
		if err != nil || h.Numel > 1<<16 {
			return
		}
		dst := make([]byte, h.Numel*h.DType.Size())
		_ = Decode(dst, m, e, h.DType) // must not panic
	})
}

// absMax16's AVX2 routine and the portable code agree, on every length
// and alignment, with the maximum anywhere (the portable code runs under
// both settings of useAVX2 through the other tests too).
func TestAbsMax16(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	buf := make([]byte, 2*300+1)
	for range 2000 {
		off := rng.IntN(2)
		n := rng.IntN(300)
		b := buf[off : off+2*n]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := uint16(0)
		for i := 0; i < n; i++ {
			want = max(want, binary.LittleEndian.Uint16(b[2*i:])&0x7FFF)
		}
		require.Equal(t, want, absMax16(b), "n %d", n)
		require.Equal(t, want, absMax16Go(b), "n %d", n)
		w32 := uint32(0)
		for i := 0; i+4 <= len(b); i += 4 {
			w32 = max(w32, binary.LittleEndian.Uint32(b[i:])&0x7FFFFFFF)
		}
		b32 := b[:len(b)/4*4]
		require.Equal(t, w32, absMax32(b32), "n %d", n)
		require.Equal(t, w32, absMax32Go(b32), "n %d", n)
	}
}
