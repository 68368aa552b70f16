package codec

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// ExponentEntropy returns the Shannon entropy (bits per element) of the
// coded symbol of each element (see split.go) and the entropy-bound ratio.
func expEntropy(src []byte, dt dtype.DType) (float64, float64) {
	var hist [256]int
	size := dt.Size()
	n := len(src) / size
	for i := 0; i < n; i++ {
		var s byte
		switch dt {
		case dtype.BFloat16:
			s = byte(binary.LittleEndian.Uint16(src[2*i:]) >> 7)
		case dtype.Float32:
			s = byte(binary.LittleEndian.Uint32(src[4*i:]) >> 23)
		case dtype.Float16:
			s = src[2*i+1]
		default:
			s = src[i]
		}
		hist[s]++
	}
	h := 0.0
	for _, c := range hist {
		if c > 0 {
			p := float64(c) / float64(n)
			h -= p * math.Log2(p)
		}
	}
	return h, float64(8*size) / (float64(8*size-8) + h)
}

func ratioOf(t *testing.T, src []byte, dt dtype.DType, k Kind) float64 {
	f := roundTrip(t, src, dt, k)
	return float64(len(src)) / float64(len(f))
}

var sigmas = []float64{1e-4, 1e-3, 1e-2, 0.02, 0.1, 1, 10, 100, 1e3}

// TestRatioGoals asserts the ratio goals on N(0, sigma^2) data (fixed seed).
func TestRatioGoals(t *testing.T) {
	n := 1 << 20
	if testing.Short() {
		n = 1 << 18
	}
	for _, sigma := range sigmas {
		// bf16: zip3 >= 1.42, huff >= 1.50 and within 2% of the entropy bound
		src := gauss(dtype.BFloat16, n, sigma, 1234)
		h, bound := expEntropy(src, dtype.BFloat16)
		z := ratioOf(t, src, dtype.BFloat16, Zip3)
		hf := ratioOf(t, src, dtype.BFloat16, Huff)
		t.Logf("bf16 sigma=%-6g H=%.4f bound=%.4f zip3=%.4f huff=%.4f (%.2f%% of bound)", sigma, h, bound, z, hf, 100*hf/bound)
		if z < 1.42 {
			t.Errorf("bf16 sigma=%g: zip3 ratio %.4f < 1.42", sigma, z)
		}
		if hf < 1.50 {
			t.Errorf("bf16 sigma=%g: huff ratio %.4f < 1.50", sigma, hf)
		}
		if hf < 0.98*bound {
			t.Errorf("bf16 sigma=%g: huff ratio %.4f not within 2%% of the entropy bound %.4f", sigma, hf, bound)
		}
		// fp32: huff >= 1.18
		src = gauss(dtype.Float32, n/2, sigma, 1234)
		h, bound = expEntropy(src, dtype.Float32)
		z = ratioOf(t, src, dtype.Float32, Zip3)
		hf = ratioOf(t, src, dtype.Float32, Huff)
		t.Logf("fp32 sigma=%-6g H=%.4f bound=%.4f zip3=%.4f huff=%.4f", sigma, h, bound, z, hf)
		if hf < 1.18 {
			t.Errorf("fp32 sigma=%g: huff ratio %.4f < 1.18", sigma, hf)
		}
		// fp16: huff >= 1.15 where N(0, sigma^2) is representable without
		// flushing most values to subnormals or overflowing (sigma in [2^-8, 1000])
		src = gauss(dtype.Float16, n, sigma, 1234)
		h, bound = expEntropy(src, dtype.Float16)
		z = ratioOf(t, src, dtype.Float16, Zip3)
		hf = ratioOf(t, src, dtype.Float16, Huff)
		t.Logf("fp16 sigma=%-6g H=%.4f bound=%.4f zip3=%.4f huff=%.4f", sigma, h, bound, z, hf)
		if sigma >= 1.0/256 && hf < 1.15 {
			t.Errorf("fp16 sigma=%g: huff ratio %.4f < 1.15", sigma, hf)
		}
	}
	for _, dt := range []dtype.DType{dtype.Float8E4M3FN, dtype.Float8E5M2} {
		for _, sigma := range []float64{0.01, 1, 10} {
			src := gauss(dt, n, sigma, 1234)
			h, bound := expEntropy(src, dt)
			t.Logf("%v sigma=%-6g H=%.4f bound=%.4f zip3=%.4f huff=%.4f", dt, sigma, h, bound, ratioOf(t, src, dt, Zip3), ratioOf(t, src, dt, Huff))
		}
		src := uniform(dt, n, 1)
		t.Logf("%v U(-1,1) zip3=%.4f huff=%.4f", dt, ratioOf(t, src, dt, Zip3), ratioOf(t, src, dt, Huff))
	}
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32} {
		src := uniform(dt, n, 1)
		t.Logf("%v U(-1,1) zip3=%.4f huff=%.4f", dt, ratioOf(t, src, dt, Zip3), ratioOf(t, src, dt, Huff))
	}
}

// TestEstimateRatio: the sampled estimate is close to the real ratio, and
// Auto picks a sensible kind.
func TestEstimateRatio(t *testing.T) {
	n := 1 << 18
	cases := []struct {
		dt   dtype.DType
		src  []byte
		auto Kind
	}{
		{dtype.BFloat16, gauss(dtype.BFloat16, n, 0.02, 5), Huff},
		{dtype.Float32, gauss(dtype.Float32, n, 3, 5), Zip3},
		{dtype.Float16, gauss(dtype.Float16, n, 0.1, 5), Huff},
		{dtype.BFloat16, randomBytes(2*n, 5), Raw},
		{dtype.Int32, randomBytes(4*n, 5), Raw},
		{dtype.Float32, fp16Valued(n, 5), Zip3}, // huff2 codes two more planes; auto weighs zip3 and huff only
		{dtype.Float8E4M3FN, gauss(dtype.Float8E4M3FN, n, 1, 5), Huff},
	}
	for _, c := range cases {
		for _, k := range []Kind{Raw, Zip3, Huff, Huff2, Huff2Packed} {
			est := EstimateRatio(c.src, c.dt, k)
			var e Encoder
			f, _ := e.Encode(nil, c.src, c.dt, k)
			real := float64(len(c.src)) / float64(len(f))
			t.Logf("%v/%v: estimate %.4f real %.4f", c.dt, k, est, real)
			if math.Abs(est-real)/real > 0.02 {
				t.Errorf("%v/%v: estimate %.4f, real %.4f", c.dt, k, est, real)
			}
		}
		if got := ChooseKind(c.src, c.dt); got != c.auto {
			t.Errorf("%v: auto chose %v, want %v", c.dt, got, c.auto)
		}
	}
}
