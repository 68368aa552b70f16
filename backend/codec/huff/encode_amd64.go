//go:build !purego

package huff

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// encode_amd64.s reads codeTable's fields at fixed offsets.
var (
	_ = [1]struct{}{}[unsafe.Offsetof(codeTable{}.bits)-1024]
	_ = [1]struct{}{}[unsafe.Offsetof(codeTable{}.wide)-2048]
)

// encodeStreamBMI2 is encodeStream in assembly (BMI2 variable shifts).
//
//go:noescape
func encodeStreamBMI2(out, syms *byte, n int, ct *codeTable) int

// histogram4x counts n symbols (a multiple of 16) into four sub-histograms.
//
//go:noescape
func histogram4x(h *[4][256]uint32, syms *byte, n int)

var hasBMI2 = cpuid.CPU.Supports(cpuid.BMI2)

func init() {
	if hasBMI2 {
		encodeStreamFn = encodeStreamAsm
		histogramFn = histogramAsm
		isAsm = true
	}
}

func encodeStreamAsm(out, syms []byte, ct *codeTable) int {
	if len(syms) == 0 {
		return 0
	}
	// room for the worst case (18-bit codes) plus the 8-byte stores
	_ = out[(len(syms)*(MaxEscLen+8)+7)/8+8-1]
	return encodeStreamBMI2(&out[0], &syms[0], len(syms), ct)
}

func histogramAsm(h *[256]uint32, syms []byte) {
	var t [4][256]uint32
	m := len(syms) &^ 15
	if m > 0 {
		histogram4x(&t, &syms[0], m)
	}
	for _, v := range syms[m:] {
		t[0][v]++
	}
	for s := range h {
		h[s] = t[0][s] + t[1][s] + t[2][s] + t[3][s]
	}
}
