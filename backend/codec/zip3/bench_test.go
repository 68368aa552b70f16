package zip3

import "testing"

func benchBlocks(b *testing.B, kernel string, decode bool) {
	defer UseKernel(kernel)()
	const n = 16384
	const nb = 64 // 2 MiB of bf16
	src := gaussBF16(n*nb, 0.02, 1)
	l := StaticLen(BF16, n)
	st := make([]byte, l*nb)
	var escs [nb][]byte
	var ws [nb]Window
	var e Encoder
	for i := 0; i < nb; i++ {
		ws[i] = ChooseWindow(BF16, src[2*n*i:2*n*(i+1)], n)
		escs[i], _, _ = e.EncodeBlock(st[l*i:l*(i+1)], nil, src[2*n*i:2*n*(i+1)], BF16, ws[i])
	}
	esc := make([]byte, 0, n*nb)
	out := make([]byte, len(src))
	var d Decoder
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		esc = esc[:0]
		for i := 0; i < nb; i++ {
			blk := src[2*n*i : 2*n*(i+1)]
			if decode {
				if _, err := d.DecodeBlock(out[2*n*i:2*n*(i+1)], st[l*i:l*(i+1)], escs[i], BF16, ws[i]); err != nil {
					b.Fatal(err)
				}
			} else {
				w := ChooseWindow(BF16, blk, n)
				esc, _, _ = e.EncodeBlock(st[l*i:l*(i+1)], esc, blk, BF16, w)
			}
		}
	}
}

func BenchmarkMemcpy2MiB(b *testing.B) {
	src := make([]byte, 2<<20)
	dst := make([]byte, 2<<20)
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}
func BenchmarkKernels(b *testing.B) {
	for _, k := range Kernels() {
		b.Run("encode/"+k, func(b *testing.B) { benchBlocks(b, k, false) })
		b.Run("decode/"+k, func(b *testing.B) { benchBlocks(b, k, true) })
	}
}

// BenchmarkChooseWindow picks the window of one cached full block, per
// kernel set (bf16 sums its sample in SIMD; benchmarks/CODEC.md, "The
// window sample in SIMD").
func BenchmarkChooseWindow(b *testing.B) {
	for _, f := range []Format{BF16, FP16, FP32} {
		src := randBytes(fullN*f.ElemSize(), 3)
		if f == BF16 {
			src = gaussBF16(fullN, 0.02, 1)
		}
		for _, k := range Kernels() {
			b.Run(f.String()+"/"+k, func(b *testing.B) {
				defer UseKernel(k)()
				for i := 0; i < b.N; i++ {
					ChooseWindow(f, src, fullN)
				}
			})
		}
	}
}
