//go:build !linux

package codecbench

import "time"

// threadCPU is not available here; CPU throughput columns stay 0.
func threadCPU() time.Duration { return 0 }
