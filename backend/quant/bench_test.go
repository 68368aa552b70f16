package quant

import (
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

func benchInput(numel int) []byte {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float32, numel)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 0.02)
	}
	return put(dtype.BFloat16, xs)
}

func BenchmarkEncodeBF16(b *testing.B) {
	src := benchInput(1 << 22)
	main := make([]byte, MainLen(Int8, 1<<22, 2048))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Encode(main, nil, src, dtype.BFloat16, Int8, 2048); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBF16(b *testing.B) {
	src := benchInput(1 << 22)
	main := make([]byte, MainLen(Int8, 1<<22, 2048))
	if _, err := Encode(main, nil, src, dtype.BFloat16, Int8, 2048); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := Decode(dst, main, nil, dtype.BFloat16); err != nil {
			b.Fatal(err)
		}
	}
}

// The int4 benchmarks use the collectives' int4 block, 256 (lossy.BlockOf).
func BenchmarkEncodeInt4BF16(b *testing.B) {
	src := benchInput(1 << 22)
	main := make([]byte, MainLen(Int4, 1<<22, 256))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Encode(main, nil, src, dtype.BFloat16, Int4, 256); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAccumulateInt4 adds one int4 message of 1<<22 bfloat16 values
// into float32 accumulators (bytes: the bfloat16 elements').
func BenchmarkAccumulateInt4(b *testing.B) {
	src := benchInput(1 << 22)
	main := make([]byte, MainLen(Int4, 1<<22, 256))
	if _, err := Encode(main, nil, src, dtype.BFloat16, Int4, 256); err != nil {
		b.Fatal(err)
	}
	acc := make([]float32, 1<<22)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := Accumulate(acc, main, nil, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeInt4BF16(b *testing.B) {
	src := benchInput(1 << 22)
	main := make([]byte, MainLen(Int4, 1<<22, 256))
	if _, err := Encode(main, nil, src, dtype.BFloat16, Int4, 256); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := Decode(dst, main, nil, dtype.BFloat16); err != nil {
			b.Fatal(err)
		}
	}
}
