//go:build amd64 && !purego

package vperm

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/cpuid/v2"
)

// TestPermutes checks the two AVX-512 permute kernels against their
// definition on random tables and data, with unaligned buffers and guard
// bytes after them. The AVX2 kernels are checked against the portable code
// by the codec tests.
func TestPermutes(t *testing.T) {
	if !cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VBMI) {
		t.Skip("no AVX-512 VBMI")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var ia, ib Table
	for k := range ia {
		ia[k], ib[k] = byte(r.IntN(128)), byte(r.IntN(128))
	}
	for _, n := range []int{0, 1, 3} {
		src := make([]byte, 128*n+1)[1:]
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		a, b := make([]byte, 64*n+8), make([]byte, 64*n+8)
		for _, pf := range []int{0, 4096} {
			if n > 0 {
				Deinterleave(&a[0], &b[0], &src[0], n, &ia, &ib, pf)
			}
			for c := 0; c < n; c++ {
				for k := 0; k < 64; k++ {
					if a[64*c+k] != src[128*c+int(ia[k])] || b[64*c+k] != src[128*c+int(ib[k])] {
						t.Fatalf("Deinterleave n=%d: chunk %d byte %d", n, c, k)
					}
				}
			}
			if !bytes.Equal(a[64*n:], make([]byte, 8)) || !bytes.Equal(b[64*n:], make([]byte, 8)) {
				t.Fatalf("Deinterleave n=%d wrote past its output", n)
			}
		}
		dst := make([]byte, 128*n+8)
		if n > 0 {
			Interleave(&dst[0], &a[0], &b[0], n, &ia, &ib)
		}
		for c := 0; c < n; c++ {
			pair := append(bytes.Clone(a[64*c:64*c+64]), b[64*c:64*c+64]...)
			for k := 0; k < 64; k++ {
				if dst[128*c+k] != pair[ia[k]] || dst[128*c+64+k] != pair[ib[k]] {
					t.Fatalf("Interleave n=%d: chunk %d byte %d", n, c, k)
				}
			}
		}
		if !bytes.Equal(dst[128*n:], make([]byte, 8)) {
			t.Fatalf("Interleave n=%d wrote past its output", n)
		}
	}
}
