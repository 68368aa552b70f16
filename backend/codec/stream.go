package codec

import "github.com/klauspost/cpuid/v2"

// Above these sizes zip3 writes bf16 non-temporally: the decoder its
// output, the encoder the R8 array of its frames (5/7 of the output). The
// input and the output then no longer share the last-level cache, and
// output lines that skip it cost no read for ownership and evict no
// input. Where each pays was measured on one Zen 4 core with a 32 MiB L3
// (benchmarks/CODEC.md, "Large buffers", "Escape stores" and "Where the
// stores turn non-temporal"). Segments in the collectives stay below both.
var (
	// decStreamMin, a third of the L3: decode won from 12 MiB (46 -> 55%
	// and 56 -> 61% of memcpy in two harnesses) and tied at 4 to 8 MiB.
	decStreamMin = l3Part(3)
	// encStreamMin, half the L3: encode won at 16 MiB (51-59 -> 59-62%)
	// and lost at 4 to 10 MiB; at 12 MiB the two harnesses disagreed.
	encStreamMin = l3Part(2)
)

// l3Part returns 1/d of the last-level cache (32 MiB if unknown), at
// least 4 MiB.
func l3Part(d int) int {
	l3 := cpuid.CPU.Cache.L3
	if l3 <= 0 {
		l3 = 32 << 20
	}
	return max(l3/d, 4<<20)
}
