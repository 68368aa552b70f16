//go:build amd64 && !purego

package quant

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

//go:noescape
func absMax16AVX2(p *byte, n int) uint16

// useAVX2 says absMax16 runs its AVX2 routine (a variable: the tests run
// the portable code too).
var useAVX2 = cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2)

// absMax16 is the largest 16-bit little-endian word of src with its top
// bit cleared.
func absMax16(src []byte) uint16 {
	n := len(src) / 2
	if !useAVX2 || n < 16 {
		return absMax16Go(src)
	}
	k := n &^ 15
	m := absMax16AVX2(unsafe.SliceData(src), k)
	return max(m, absMax16Go(src[2*k:]))
}
