package codecbench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
)

// TestFiles runs the benchmark (rounds interleaved, best kept, wall and
// thread-CPU time) on tensors read from raw files, for real weights too big
// to commit: ZIPCCL_BENCH_FILES=stem[:stem...] reads stem.bf16, stem.fp16
// and stem.fp32 (e.g. written by tensor.numpy().tofile); ZIPCCL_BENCH_KINDS
// (default "huff,huff2") picks the kinds.
func TestFiles(t *testing.T) {
	list := os.Getenv("ZIPCCL_BENCH_FILES")
	if list == "" {
		t.Skip("set ZIPCCL_BENCH_FILES=stem[:stem...]")
	}
	var kinds []codec.Kind
	for _, s := range filepath.SplitList(orDefault(os.Getenv("ZIPCCL_BENCH_KINDS"), "huff:huff2")) {
		k, err := codec.ParseKind(s)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k)
	}
	for _, stem := range filepath.SplitList(list) {
		for _, d := range []struct {
			ext string
			dt  dtype.DType
		}{{"bf16", dtype.BFloat16}, {"fp16", dtype.Float16}, {"fp32", dtype.Float32}} {
			src, err := os.ReadFile(stem + "." + d.ext)
			if err != nil {
				continue
			}
			for _, r := range Run(src, d.dt, Options{Kinds: kinds, Rounds: 7, SkipExternal: true}) {
				if (r.Op == "encode" || r.Op == "decode") && r.Name != "fp8" {
					t.Logf("%s.%s %-6s %-6s ratio %.5f  wall %.3f GB/s  cpu %.3f GB/s", filepath.Base(stem), d.ext, r.Name, r.Op, r.Ratio, r.GBps, r.CPUGBps)
				}
			}
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
