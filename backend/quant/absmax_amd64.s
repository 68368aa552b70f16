//go:build amd64 && !purego

#include "textflag.h"

// func absMax16AVX2(p *byte, n int) uint16
// The largest of n 16-bit words with their top bit cleared (the magnitude
// of a bfloat16 or float16), n a positive multiple of 16.
TEXT ·absMax16AVX2(SB), NOSPLIT, $0-18
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPCMPEQW Y15, Y15, Y15
	VPSRLW $1, Y15, Y15 // 0x7FFF in every lane
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1

loop32:
	CMPQ CX, $32
	JB   tail16
	VPAND   (SI), Y15, Y2
	VPAND   32(SI), Y15, Y3
	VPMAXUW Y2, Y0, Y0
	VPMAXUW Y3, Y1, Y1
	ADDQ    $64, SI
	SUBQ    $32, CX
	JMP     loop32

tail16:
	CMPQ    CX, $16
	JB      done
	VPAND   (SI), Y15, Y2
	VPMAXUW Y2, Y0, Y0

done:
	VPMAXUW      Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUW      X1, X0, X0
	// the horizontal maximum: the minimum of the complements, complemented
	VPCMPEQW    X2, X2, X2
	VPXOR       X2, X0, X0
	VPHMINPOSUW X0, X0
	VMOVD       X0, AX
	NOTL        AX
	MOVW        AX, ret+16(FP)
	VZEROUPPER
	RET
