package bufs

import "testing"

func TestSplit(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		for _, es := range []int{1, 2, 8} {
			for _, numel := range []int{0, 1, 5, 17, 64} {
				buf := make([]byte, numel*es)
				bs := Split(buf, n, es)
				off := 0
				for i, b := range bs {
					want := numel / n
					if i < numel%n {
						want++
					}
					if len(b) != want*es || cap(b) != len(b) {
						t.Fatalf("n%d es%d numel%d: block %d has %d bytes (cap %d), want %d", n, es, numel, i, len(b), cap(b), want*es)
					}
					if len(b) > 0 && &b[0] != &buf[off] {
						t.Fatalf("block %d not contiguous", i)
					}
					off += len(b)
				}
				if off != len(buf) {
					t.Fatalf("blocks cover %d of %d", off, len(buf))
				}
			}
		}
	}
}
