package codec

import (
	"fmt"
	"testing"

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
