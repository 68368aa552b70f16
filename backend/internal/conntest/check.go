package conntest

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// CheckGoroutines fails tb if more goroutines are running than before. The
// algorithms wait for their goroutines, so any excess is a leak; the short
// grace only covers goroutines between wg.Done and their actual exit.
func CheckGoroutines(tb testing.TB, before int) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			tb.Fatalf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), before, buf)
		}
		time.Sleep(time.Millisecond)
	}
}

// MustOK fails tb if any rank failed or w holds a message nobody received.
func MustOK(tb testing.TB, w *World, errs []error) {
	tb.Helper()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	if err := w.Leftovers(); err != nil {
		tb.Fatal(err)
	}
}

// SameBytes fails tb at the first byte where got differs from want.
func SameBytes(tb testing.TB, what string, got, want []byte) {
	tb.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		tb.Fatalf("%s: mismatch at byte %d of %d (want len %d)", what, i, len(got), len(want))
	}
}
