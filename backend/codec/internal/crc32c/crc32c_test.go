package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<16+300)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	t.Logf("fold kernel: %v", useFold)
	for _, n := range []int{0, 1, 255, 256, 1023, 1024, 1025, 1280, 4096, 5000, 1 << 16, len(buf)} {
		for _, c := range []uint32{0, 1, 0xdeadbeef, r.Uint32()} {
			want := crc32.Update(c, table, buf[:n])
			if got := Update(c, buf[:n]); got != want {
				t.Fatalf("n=%d crc=%x: got %08x want %08x", n, c, got, want)
			}
		}
	}
}

func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 32<<10)
	for _, on := range []bool{true, false} {
		name := "fold"
		if !on {
			name = "stdlib"
		}
		b.Run(name, func(b *testing.B) {
			old := SetFold(on)
			defer SetFold(old)
			b.SetBytes(int64(len(buf)))
			for i := 0; i < b.N; i++ {
				Checksum(buf)
			}
		})
	}
}
