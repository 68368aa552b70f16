//go:build !purego

package huff

import "github.com/klauspost/cpuid/v2"

// encodeStreamBMI2 is encodeStream in assembly (BMI2 variable shifts).
//
//go:noescape
func encodeStreamBMI2(out, syms *byte, n int, ct *[256]uint32) int

var hasBMI2 = cpuid.CPU.Supports(cpuid.BMI2)

func init() {
	if hasBMI2 {
		encodeStreamFn = encodeStreamAsm
		isAsm = true
	}
}

func encodeStreamAsm(out, syms []byte, ct *[256]uint32) int {
	if len(syms) == 0 {
		return 0
	}
	// room for the worst case (18-bit codes) plus the 8-byte stores
	_ = out[(len(syms)*(MaxEscLen+8)+7)/8+8-1]
	return encodeStreamBMI2(&out[0], &syms[0], len(syms), ct)
}
