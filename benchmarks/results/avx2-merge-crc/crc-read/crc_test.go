// The CRC-32C instruction path of hash/crc32 over buffers in L2 (128 KiB),
// L3 (4 MiB) and DRAM (64 MiB): `go test -bench . -count 2` here.
package crcb

import (
	"fmt"
	"hash/crc32"
	"testing"
)

var tab = crc32.MakeTable(crc32.Castagnoli)

func BenchmarkCRC(b *testing.B) {
	for _, n := range []int{128 << 10, 4 << 20, 64 << 20} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				crc32.Checksum(buf, tab)
			}
		})
	}
}
