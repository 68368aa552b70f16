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

// SPLIT2 splits 64 source bytes into 32 low and 32 high parts of each
// element: SHR moves the high part down, MASK (built by the caller) keeps
// the low part, PACK packs two registers of elements into parts, and
// VPERMQ puts the 128-bit lanes back in order.
#define SPLIT2(SHR, PACK) \
	PREFETCHT1 (SI)(R12*1) \
	VMOVDQU (SI), Y0 \
	VMOVDQU 32(SI), Y1 \
	SHR     Y0, Y2 \
	SHR     Y1, Y3 \
	PACK    Y3, Y2, Y2 \
	VPERMQ  $0xD8, Y2, Y2 \
	VMOVDQU Y2, (DX) \
	VPAND   Y11, Y0, Y0 \
	VPAND   Y11, Y1, Y1 \
	PACK    Y1, Y0, Y0 \
	VPERMQ  $0xD8, Y0, Y0 \
	VMOVDQU Y0, (DI)

// JOIN2 is the inverse: the lanes of 32 low and 32 high parts reordered,
// then interleaved by UNPL and UNPH into 64 bytes of elements.
#define JOIN2(UNPL, UNPH) \
	VMOVDQU (SI), Y0 \
	VMOVDQU (DX), Y1 \
	VPERMQ  $0xD8, Y0, Y0 \
	VPERMQ  $0xD8, Y1, Y1 \
	UNPL    Y1, Y0, Y2 \
	UNPH    Y1, Y0, Y3 \
	VMOVDQU Y2, (DI) \
	VMOVDQU Y3, 32(DI)

#define SHRW VPSRLW $8,
#define SHRD VPSRLD $16,

// func SplitBytesAVX2(lo, hi, src *byte, n int, pf int)
TEXT ·SplitBytesAVX2(SB), NOSPLIT, $0-40
	MOVQ lo+0(FP), DI
	MOVQ hi+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ pf+32(FP), R12
	VPCMPEQW Y11, Y11, Y11
	VPSRLW   $8, Y11, Y11 // 0x00ff in each word
	TESTQ CX, CX
	JZ   sbdone

sbloop:
	SPLIT2(SHRW, VPACKUSWB)
	ADDQ $64, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  sbloop

sbdone:
	VZEROUPPER
	RET

// func SplitWordsAVX2(lo, hi, src *byte, n int, pf int)
TEXT ·SplitWordsAVX2(SB), NOSPLIT, $0-40
	MOVQ lo+0(FP), DI
	MOVQ hi+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ pf+32(FP), R12
	VPCMPEQD Y11, Y11, Y11
	VPSRLD   $16, Y11, Y11 // 0x0000ffff in each dword
	TESTQ CX, CX
	JZ   swdone

swloop:
	SPLIT2(SHRD, VPACKUSDW)
	ADDQ $64, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  swloop

swdone:
	VZEROUPPER
	RET

// func JoinBytesAVX2(dst, lo, hi *byte, n int)
TEXT ·JoinBytesAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JZ   jbdone

jbloop:
	JOIN2(VPUNPCKLBW, VPUNPCKHBW)
	ADDQ $64, DI
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  jbloop

jbdone:
	VZEROUPPER
	RET

// func JoinWordsAVX2(dst, lo, hi *byte, n int)
TEXT ·JoinWordsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JZ   jwdone

jwloop:
	JOIN2(VPUNPCKLWD, VPUNPCKHWD)
	ADDQ $64, DI
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  jwloop

jwdone:
	VZEROUPPER
	RET
