package codec

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// BenchmarkRealFiles codes tensors read from raw files, for real weights
// that are too big to commit: ZIPCCL_BENCH_FILES is a comma-free list of
// PREFIX.{bf16,fp16,fp32} stems separated by ':' (e.g. a Python one-liner
// writes /tmp/w.fp32 with tensor.numpy().tofile). Huff, Huff2 and
// Huff2Packed run side by side on each buffer; ratio is raw bytes / frame
// bytes.
func BenchmarkRealFiles(b *testing.B) {
	list := os.Getenv("ZIPCCL_BENCH_FILES")
	if list == "" {
		b.Skip("set ZIPCCL_BENCH_FILES=stem[:stem...] (files stem.bf16, stem.fp16, stem.fp32)")
	}
	dts := []struct {
		ext string
		dt  dtype.DType
	}{{"bf16", dtype.BFloat16}, {"fp16", dtype.Float16}, {"fp32", dtype.Float32}}
	for _, stem := range filepath.SplitList(list) {
		for _, d := range dts {
			src, err := os.ReadFile(stem + "." + d.ext)
			if err != nil {
				continue
			}
			src = src[:len(src)/d.dt.Size()*d.dt.Size()]
			for _, k := range []Kind{Huff, Huff2, Huff2Packed} {
				benchOne(b, fmt.Sprintf("%s.%s/%v", filepath.Base(stem), d.ext, k), src, d.dt, k)
			}
		}
	}
}

func benchOne(b *testing.B, name string, src []byte, dt dtype.DType, k Kind) {
	var e Encoder
	frame, err := e.Encode(nil, src, dt, k)
	if err != nil {
		b.Fatal(err)
	}
	ratio := float64(len(src)) / float64(len(frame))
	b.Logf("%s: %d -> %d bytes, ratio %.5f", name, len(src), len(frame), ratio)
	b.Run(name+"/encode", func(b *testing.B) {
		dst := make([]byte, 0, MaxEncodedLen(len(src), dt)+len(src)/2)
		b.SetBytes(int64(len(src)))
		for i := 0; i < b.N; i++ {
			dst, _ = e.Encode(dst[:0], src, dt, k)
		}
		b.ReportMetric(ratio, "ratio")
	})
	b.Run(name+"/decode", func(b *testing.B) {
		var d Decoder
		out := make([]byte, len(src))
		b.SetBytes(int64(len(src)))
		for i := 0; i < b.N; i++ {
			if _, err := d.Decode(out, frame); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(ratio, "ratio")
	})
}
