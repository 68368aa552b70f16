package codec

import (
	"fmt"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Benchmarks count throughput in input (raw) bytes. BenchmarkMemcpy copies a
// buffer of the same size in the same run, as the baseline.
var benchSizes = []int{4 << 20, 16 << 20}

func BenchmarkMemcpy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			src := gauss(dtype.BFloat16, size/2, 0.02, 1)
			dst := make([]byte, size)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}

func benchCodec(b *testing.B, dt dtype.DType, k Kind) {
	for _, size := range benchSizes {
		src := gauss(dt, size/dt.Size(), 0.02, 1)
		var e Encoder
		frame, _ := e.Encode(nil, src, dt, k)
		b.Run(fmt.Sprintf("encode/%dMiB", size>>20), func(b *testing.B) {
			dst := make([]byte, 0, len(frame)+1<<20)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				dst, _ = e.Encode(dst[:0], src, dt, k)
			}
			b.ReportMetric(float64(len(src))/float64(len(frame)), "ratio")
		})
		b.Run(fmt.Sprintf("decode/%dMiB", size>>20), func(b *testing.B) {
			var d Decoder
			out := make([]byte, size)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				if _, err := d.Decode(out, frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBF16Zip3(b *testing.B) { benchCodec(b, dtype.BFloat16, Zip3) }
func BenchmarkBF16Huff(b *testing.B) { benchCodec(b, dtype.BFloat16, Huff) }
func BenchmarkBF16Raw(b *testing.B)  { benchCodec(b, dtype.BFloat16, Raw) }
func BenchmarkBF16Auto(b *testing.B) { benchCodec(b, dtype.BFloat16, Auto) }
func BenchmarkFP32Zip3(b *testing.B) { benchCodec(b, dtype.Float32, Zip3) }
func BenchmarkFP32Huff(b *testing.B) { benchCodec(b, dtype.Float32, Huff) }
func BenchmarkFP16Huff(b *testing.B) { benchCodec(b, dtype.Float16, Huff) }

func BenchmarkChooseKind(b *testing.B) {
	src := gauss(dtype.BFloat16, 1<<16, 0.02, 1)
	for i := 0; i < b.N; i++ {
		ChooseKind(src, dtype.BFloat16)
	}
}

// BenchmarkZip3VsCopy encodes bf16 N(0, 0.02^2) data with zip3 beside Go's
// copy of the same buffer, call for call, and reports the encode's
// throughput as a share of the copy's (%copy). The sizes sit below, at
// (43.25 MiB, the MiniLM tensor) and beyond the L3 (benchmarks/CODEC.md,
// "Non-temporal R8 stores").
func BenchmarkZip3VsCopy(b *testing.B) {
	for _, blocks := range []int{512, 1384, 2048} {
		src := gauss(dtype.BFloat16, blocks<<14, 0.02, 1)
		cp := make([]byte, len(src))
		var e Encoder
		dst, _ := e.Encode(nil, src, dtype.BFloat16, Zip3)
		b.Run(fmt.Sprintf("%.2fMiB", float64(len(src))/(1<<20)), func(b *testing.B) {
			var tc, te time.Duration
			b.SetBytes(int64(len(src)))
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				copy(cp, src)
				t1 := time.Now()
				dst, _ = e.Encode(dst[:0], src, dtype.BFloat16, Zip3)
				tc, te = tc+t1.Sub(t0), te+time.Since(t1)
			}
			b.ReportMetric(100*tc.Seconds()/te.Seconds(), "%copy")
		})
	}
}

// BenchmarkKernelSets runs float32 and float16 zip3 on 4 MiB with each
// kernel set this CPU has (benchmarks/CODEC.md, "float32 and float16 in
// SIMD").
func BenchmarkKernelSets(b *testing.B) {
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float16} {
		src := gauss(dt, (4<<20)/dt.Size(), 0.02, 1)
		for _, kn := range zip3.Kernels() {
			restore := zip3.UseKernel(kn)
			var e Encoder
			frame, _ := e.Encode(nil, src, dt, Zip3)
			b.Run(fmt.Sprintf("%v/%s/encode", dt, kn), func(b *testing.B) {
				dst := make([]byte, 0, len(frame)+1<<20)
				b.SetBytes(int64(len(src)))
				for i := 0; i < b.N; i++ {
					dst, _ = e.Encode(dst[:0], src, dt, Zip3)
				}
			})
			b.Run(fmt.Sprintf("%v/%s/decode", dt, kn), func(b *testing.B) {
				var d Decoder
				out := make([]byte, len(src))
				b.SetBytes(int64(len(src)))
				for i := 0; i < b.N; i++ {
					if _, err := d.Decode(out, frame); err != nil {
						b.Fatal(err)
					}
				}
			})
			restore()
		}
	}
}
