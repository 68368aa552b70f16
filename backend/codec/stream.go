package codec

import "github.com/klauspost/cpuid/v2"

// streamMin is the tensor size from which zip3 writes bf16 non-temporally:
// the decoder its output, the encoder the R8 array of its frames (5/7 of
// the output). It is half the last-level cache, where the output would
// evict the input being coded. On one Zen 4 core this took a 16 MiB decode
// from 40-45% to 50-60% of memcpy, and a 16 MiB encode from 51-53% to
// 59-62%; at 8 MiB both paths lose (benchmarks/CODEC.md, "Large buffers"
// and "Escape stores"). Segments in the collectives stay below it.
var streamMin = func() int {
	if l3 := cpuid.CPU.Cache.L3; l3 > 0 {
		return max(l3/2, 4<<20)
	}
	return 16 << 20
}()
