//go:build !purego

#include "textflag.h"

// func Deinterleave(a, b, src *byte, n int, ia, ib *Table, pf int)
TEXT ·Deinterleave(SB), NOSPLIT, $0-56
	MOVQ a+0(FP), DI
	MOVQ b+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ ia+32(FP), AX
	VMOVDQU64 (AX), Z24
	MOVQ ib+40(FP), AX
	VMOVDQU64 (AX), Z25
	MOVQ pf+48(FP), R12
	TESTQ CX, CX
	JZ   ddone

dloop:
	PREFETCHT1 (SI)(R12*1)
	PREFETCHT1 64(SI)(R12*1)
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQA64 Z0, Z2
	VPERMT2B  Z1, Z24, Z2
	VPERMT2B  Z1, Z25, Z0
	VMOVDQU64 Z2, (DI)
	VMOVDQU64 Z0, (DX)
	ADDQ $128, SI
	ADDQ $64, DI
	ADDQ $64, DX
	DECQ CX
	JNZ  dloop

ddone:
	VZEROUPPER
	RET

// func Interleave(dst, a, b *byte, n int, i0, i1 *Table)
TEXT ·Interleave(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ i0+32(FP), AX
	VMOVDQU64 (AX), Z24
	MOVQ i1+40(FP), AX
	VMOVDQU64 (AX), Z25
	TESTQ CX, CX
	JZ   idone

iloop:
	VMOVDQU64 (SI), Z0
	VMOVDQU64 (DX), Z1
	VMOVDQA64 Z0, Z2
	VPERMT2B  Z1, Z24, Z2
	VPERMT2B  Z1, Z25, Z0
	VMOVDQU64 Z2, (DI)
	VMOVDQU64 Z0, 64(DI)
	ADDQ $128, DI
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JNZ  iloop

idone:
	VZEROUPPER
	RET
