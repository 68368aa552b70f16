package quant

import (
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// The benchmarks code 1<<22 bfloat16 values N(0, 0.02^2) in the
// collectives' blocks (lossy.BlockOf: int8 2048, int4 256); bytes are the
// bfloat16 input's.
const benchNumel = 1 << 22

// benchCoded is the benchmarks' input and, coded with mode, its main part.
func benchCoded(b *testing.B, mode Mode, block int) (src, main []byte) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float32, benchNumel)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 0.02)
	}
	src = put(dtype.BFloat16, xs)
	main = make([]byte, MainLen(mode, benchNumel, block))
	if _, err := Encode(main, nil, src, dtype.BFloat16, mode, block); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	return src, main
}

func benchEncode(b *testing.B, mode Mode, block int) {
	src, main := benchCoded(b, mode, block)
	for b.Loop() {
		if _, err := Encode(main, nil, src, dtype.BFloat16, mode, block); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecode(b *testing.B, mode Mode, block int) {
	src, main := benchCoded(b, mode, block)
	dst := make([]byte, len(src))
	for b.Loop() {
		if err := Decode(dst, main, nil, dtype.BFloat16); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeBF16(b *testing.B)     { benchEncode(b, Int8, 2048) }
func BenchmarkDecodeBF16(b *testing.B)     { benchDecode(b, Int8, 2048) }
func BenchmarkEncodeInt4BF16(b *testing.B) { benchEncode(b, Int4, 256) }
func BenchmarkDecodeInt4BF16(b *testing.B) { benchDecode(b, Int4, 256) }

// BenchmarkAccumulateInt4 adds one int4 message into float32 accumulators.
func BenchmarkAccumulateInt4(b *testing.B) {
	_, main := benchCoded(b, Int4, 256)
	acc := make([]float32, benchNumel)
	for b.Loop() {
		if err := Accumulate(acc, main, nil, false); err != nil {
			b.Fatal(err)
		}
	}
}

// The fp8 benchmarks use the policy's default block, 256.
func BenchmarkEncodeFP8BF16(b *testing.B) { benchEncode(b, FP8, 256) }
func BenchmarkDecodeFP8BF16(b *testing.B) { benchDecode(b, FP8, 256) }

// BenchmarkAccumulateFP8 adds one fp8 message into float32 accumulators.
func BenchmarkAccumulateFP8(b *testing.B) {
	_, main := benchCoded(b, FP8, 256)
	acc := make([]float32, benchNumel)
	for b.Loop() {
		if err := Accumulate(acc, main, nil, false); err != nil {
			b.Fatal(err)
		}
	}
}
