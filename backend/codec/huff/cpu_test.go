//go:build linux

package huff

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threadTime() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// cpuBest runs fn reps times and returns the smallest thread CPU time.
func cpuBest(reps int, fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Hour
	for i := 0; i < reps; i++ {
		t0 := threadTime()
		fn()
		if d := threadTime() - t0; d < best {
			best = d
		}
	}
	return best
}

func TestCPUTimes(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	s := gaussExp(65536, 0.02, 3)
	var e Encoder
	rec := e.AppendBlock(nil, s)
	var d Decoder
	parseTable(rec[1:], &d.t)
	out := make([]byte, len(s))
	dst := make([]byte, 0, 1<<20)
	lut := cpuBest(200, func() { d.buildLUT() })
	dec := cpuBest(200, func() { d.DecodeBlock(out, rec) })
	decNC := cpuBest(200, func() { d.keyLen = 0; d.DecodeBlock(out, rec) })
	enc := cpuBest(200, func() { dst = e.AppendBlock(dst[:0], s) })
	encNR := cpuBest(200, func() { e.Reset(); dst = e.AppendBlock(dst[:0], s) })
	gb := func(d time.Duration) float64 { return float64(2*len(s)) / d.Seconds() / 1e9 }
	t.Logf("buildLUT %v; decode %v (%.2f GB/s bf16), nocache %v (%.2f); encode %v (%.2f), noreuse %v (%.2f)",
		lut, dec, gb(dec), decNC, gb(decNC), enc, gb(enc), encNR, gb(encNR))
}
