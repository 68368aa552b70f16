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

// encStreamMin is the source size from which the zip3 encoder writes the
// R8 array of its bf16 frames, 5/7 of the output, with non-temporal
// stores: the whole last-level cache, where the source and the frame no
// longer both fit. On one Zen 4 core this took the encode from 51-54% to
// 56-58% of memcpy at 43 and 64 MiB; at 16 MiB it lost 4%
// (benchmarks/CODEC.md, "Non-temporal R8 stores").
var encStreamMin = func() int {
	if l3 := cpuid.CPU.Cache.L3; l3 > 0 {
		return max(l3, 8<<20)
	}
	return 32 << 20
}()
