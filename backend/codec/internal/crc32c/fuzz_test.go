package crc32c

import (
	"hash/crc32"
	"os"
	"testing"

	"github.com/zipccl/zipccl/backend/codec/internal/fuzzseed"
)

// FuzzUpdate compares against hash/crc32 on arbitrary input (padded past
// the folding threshold so the kernel runs).
func FuzzUpdate(f *testing.F) {
	f.Add([]byte("hello"), uint32(0), uint16(0))
	f.Add(make([]byte, 300), uint32(0xffffffff), uint16(2000))
	f.Fuzz(func(t *testing.T, data []byte, crc uint32, extra uint16) {
		buf := make([]byte, len(data)+int(extra))
		copy(buf, data)
		for i := len(data); i < len(buf); i++ {
			buf[i] = byte(i*7) ^ byte(crc)
		}
		if got, want := Update(crc, buf), crc32.Update(crc, table, buf); got != want {
			t.Fatalf("len %d: %08x want %08x", len(buf), got, want)
		}
	})
}

func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_CORPUS") == "" {
		t.Skip("set ZIPCCL_WRITE_CORPUS=1")
	}
	if err := fuzzseed.Write("FuzzUpdate", "long", []byte("seed"), uint32(12345), uint16(5000)); err != nil {
		t.Fatal(err)
	}
}
