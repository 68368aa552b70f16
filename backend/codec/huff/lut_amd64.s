//go:build !purego

#include "textflag.h"

// lane indices 0..7, then the broadcast constants 8, lutInvalid (12), 1<<24
DATA lutconst<>+0(SB)/4, $0
DATA lutconst<>+4(SB)/4, $1
DATA lutconst<>+8(SB)/4, $2
DATA lutconst<>+12(SB)/4, $3
DATA lutconst<>+16(SB)/4, $4
DATA lutconst<>+20(SB)/4, $5
DATA lutconst<>+24(SB)/4, $6
DATA lutconst<>+28(SB)/4, $7
DATA lutconst<>+32(SB)/4, $8
DATA lutconst<>+36(SB)/4, $12
DATA lutconst<>+40(SB)/4, $0x1000000
GLOBL lutconst<>(SB), RODATA|NOPTR, $44

// GATHER(IDX, M, L) gathers M = m[IDX] (16 bits) for the eight lanes and
// sets L to its code length (lutInvalid for the escape or no code).
#define GATHER(IDX, M, L) \
	VPCMPEQD   Y10, Y10, Y10 \
	VPXOR      M, M, M \
	VPGATHERDD Y10, (SI)(IDX*2), M \
	VPAND      Y11, M, M \
	VPSRLD     $8, M, L \
	VPSUBD     L, Y12, L

// NOCODE(M, L): the lanes read as no code (M 0, L lutInvalid).
#define NOCODE(M, L) \
	VPXOR   M, M, M \
	VMOVDQU Y12, L

// func fillLUTAVX2(lut *[lutSize]uint64, m *[lutSize + 2]uint16, more int)
//
// fillLUT for eight indices v at a time: Y15 v, Y14 8s, Y13 0xff, Y12
// lutInvalid, Y11 0xffff, R8 more. The first code's entries are a plain
// load (the v are consecutive), the up to three after it gathers (the
// ones past more read as no code). Each 4-byte gather reads m[i] and
// m[i+1] (the spare entry at the end keeps the last one in bounds).
TEXT ·fillLUTAVX2(SB), NOSPLIT, $0-24
	MOVQ         lut+0(FP), DI
	MOVQ         m+8(FP), SI
	MOVQ         more+16(FP), R8
	VMOVDQU      lutconst<>+0(SB), Y15
	VPBROADCASTD lutconst<>+32(SB), Y14
	VPBROADCASTD lutconst<>+36(SB), Y12
	VPCMPEQD     Y11, Y11, Y11
	VPSRLD       $24, Y11, Y13
	VPSRLD       $16, Y11, Y11
	MOVQ         $256, CX
	MOVQ         SI, BX // m[v]: the eight v of a round are consecutive

loop:
	VPMOVZXWD (BX), Y1
	VPSRLD    $8, Y1, Y2
	VPSUBD    Y2, Y12, Y2
	ADDQ      $16, BX
	VPSRLVD   Y2, Y15, Y0 // r = v >> l1
	CMPQ      R8, $1
	JLT       none1
	GATHER(Y0, Y3, Y4)
	VPSRLVD  Y4, Y0, Y0
	CMPQ     R8, $2
	JLT      none2
	GATHER(Y0, Y5, Y6)
	VPSRLVD  Y6, Y0, Y0
	CMPQ     R8, $3
	JLT      none3
	GATHER(Y0, Y7, Y8)
	JMP      fit

none1:
	NOCODE(Y3, Y4)

none2:
	NOCODE(Y5, Y6)

none3:
	NOCODE(Y7, Y8)

fit:

	// okK (all ones) when the first K codes fit: keep lK, count -okK
	VPADDD   Y2, Y4, Y0
	VPCMPGTD Y0, Y12, Y9
	VPAND    Y9, Y4, Y4
	VPADDD   Y6, Y0, Y0
	VPCMPGTD Y0, Y12, Y10
	VPAND    Y10, Y6, Y6
	VPADDD   Y10, Y9, Y9
	VPADDD   Y8, Y0, Y0
	VPCMPGTD Y0, Y12, Y10
	VPAND    Y10, Y8, Y8
	VPADDD   Y10, Y9, Y9

	// low word: bits | (1 + count of further codes)<<24
	VPADDD Y4, Y2, Y0
	VPADDD Y6, Y0, Y0
	VPADDD Y8, Y0, Y0
	VPSLLD $24, Y9, Y9
	VPSUBD Y9, Y0, Y0
	VPBROADCASTD lutconst<>+40(SB), Y9
	VPADDD Y9, Y0, Y0

	// high word: the four symbols
	VPAND  Y13, Y1, Y1
	VPAND  Y13, Y3, Y3
	VPSLLD $8, Y3, Y3
	VPOR   Y3, Y1, Y1
	VPAND  Y13, Y5, Y5
	VPSLLD $16, Y5, Y5
	VPOR   Y5, Y1, Y1
	VPSLLD $24, Y7, Y7
	VPOR   Y7, Y1, Y1

	// no first code: entry 0
	VPCMPGTD Y2, Y12, Y10
	VPAND    Y10, Y0, Y0
	VPAND    Y10, Y1, Y1

	VPUNPCKLDQ Y1, Y0, Y2
	VPUNPCKHDQ Y1, Y0, Y3
	VPERM2I128 $0x20, Y3, Y2, Y4
	VPERM2I128 $0x31, Y3, Y2, Y5
	VMOVDQU    Y4, (DI)
	VMOVDQU    Y5, 32(DI)
	ADDQ       $64, DI
	VPADDD     Y14, Y15, Y15
	DECQ       CX
	JNZ        loop
	VZEROUPPER
	RET
