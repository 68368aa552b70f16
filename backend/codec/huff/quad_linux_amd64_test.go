//go:build !purego

package huff

import (
	"bytes"
	"syscall"
	"testing"
)

// TestQuadGuardPage decodes records that end where an unreadable page
// begins, whole and cut short: a read of the kernel's past its source
// faults here, where elsewhere it would read a neighbour's bytes unseen.
func TestQuadGuardPage(t *testing.T) {
	if !useQuad {
		t.Skip("no stream kernel on this CPU/build")
	}
	recs, ns := quadRecords()
	page := syscall.Getpagesize()
	for i, rec := range recs {
		size := (len(rec)+page-1)/page*page + page
		mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
			t.Fatal(err)
		}
		end := size - page
		for _, cut := range []int{len(rec), len(rec) - 1, len(rec) - 9, len(rec) * 3 / 4} {
			src := mem[end-cut : end]
			copy(src, rec[:cut])
			out := make([]byte, ns[i])
			var d Decoder
			_, err := d.DecodeBlock(out, src)
			if cut == len(rec) && (err != nil || !bytes.Equal(out, mustPortable(t, rec, ns[i]))) {
				t.Fatalf("record %d: %v", i, err)
			}
		}
		if err := syscall.Munmap(mem); err != nil {
			t.Fatal(err)
		}
	}
}

// mustPortable decodes rec with the portable decoder.
func mustPortable(t *testing.T, rec []byte, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	var d Decoder
	var err error
	withPortable(func() { _, err = d.DecodeBlock(out, rec) })
	if err != nil {
		t.Fatal(err)
	}
	return out
}
