//go:build !purego

package crc32c

import "github.com/klauspost/cpuid/v2"

var useFold = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512VL, cpuid.VPCLMULQDQ, cpuid.CLMUL)

// fold reduces p[:n] (n a multiple of 256, n >= 256) with s XORed into its
// first four bytes to 16 bytes with the same CRC (from a zero state).
//
//go:noescape
func fold(p *byte, n int, s uint32, k *[10]uint64, out *[16]byte)

// SetFold enables or disables the folding kernel (tests) and returns the previous setting.
func SetFold(on bool) bool {
	old := useFold
	useFold = on && cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512VL, cpuid.VPCLMULQDQ, cpuid.CLMUL)
	return old
}
