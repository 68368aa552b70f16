package codec

import "github.com/klauspost/cpuid/v2"

// streamMin is the decoded size from which zip3 writes its bf16 output
// with non-temporal stores: half the last-level cache, where the output
// would evict the frame it is decoding from. On one Zen 4 core this took
// a 16 MiB decode from 40-45% to 50-60% of memcpy and gained nothing at 4
// and 8 MiB (benchmarks/CODEC.md, "Large buffers"). Segments in the
// collectives stay below it.
var streamMin = func() int {
	if l3 := cpuid.CPU.Cache.L3; l3 > 0 {
		return max(l3/2, 4<<20)
	}
	return 16 << 20
}()
