//go:build linux

package codecbench

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time consumed by the calling OS thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
