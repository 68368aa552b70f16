//go:build !purego

#include "textflag.h"

DATA sgather<>+0(SB)/8, $0x0e0c0a0806040200
DATA sgather<>+8(SB)/8, $0x1e1c1a1816141210
DATA sgather<>+16(SB)/8, $0x2e2c2a2826242220
DATA sgather<>+24(SB)/8, $0x3e3c3a3836343230
DATA sgather<>+32(SB)/8, $0x4e4c4a4846444240
DATA sgather<>+40(SB)/8, $0x5e5c5a5856545250
DATA sgather<>+48(SB)/8, $0x6e6c6a6866646260
DATA sgather<>+56(SB)/8, $0x7e7c7a7876747270
GLOBL sgather<>(SB), RODATA|NOPTR, $64
DATA silv0<>+0(SB)/8, $0x4303420241014000
DATA silv0<>+8(SB)/8, $0x4707460645054404
DATA silv0<>+16(SB)/8, $0x4b0b4a0a49094808
DATA silv0<>+24(SB)/8, $0x4f0f4e0e4d0d4c0c
DATA silv0<>+32(SB)/8, $0x5313521251115010
DATA silv0<>+40(SB)/8, $0x5717561655155414
DATA silv0<>+48(SB)/8, $0x5b1b5a1a59195818
DATA silv0<>+56(SB)/8, $0x5f1f5e1e5d1d5c1c
GLOBL silv0<>(SB), RODATA|NOPTR, $64
DATA silv1<>+0(SB)/8, $0x6323622261216020
DATA silv1<>+8(SB)/8, $0x6727662665256424
DATA silv1<>+16(SB)/8, $0x6b2b6a2a69296828
DATA silv1<>+24(SB)/8, $0x6f2f6e2e6d2d6c2c
DATA silv1<>+32(SB)/8, $0x7333723271317030
DATA silv1<>+40(SB)/8, $0x7737763675357434
DATA silv1<>+48(SB)/8, $0x7b3b7a3a79397838
DATA silv1<>+56(SB)/8, $0x7f3f7e3e7d3d7c3c
GLOBL silv1<>(SB), RODATA|NOPTR, $64

// func splitBF16AVX512(r8, syms, src *byte, n64 int)
TEXT ·splitBF16AVX512(SB), NOSPLIT, $0-32
	MOVQ r8+0(FP), DI
	MOVQ syms+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n64+24(FP), CX
	MOVQ $0x7f, AX
	VPBROADCASTB AX, Z25
	VMOVDQU64 sgather<>(SB), Z24
	TESTQ CX, CX
	JZ   sdone
sloop:
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VPSRLW    $7, Z0, Z2
	VPSRLW    $7, Z1, Z3
	VPERMT2B  Z3, Z24, Z2
	VMOVDQU64 Z2, (DX)
	VPSRLW    $8, Z0, Z4
	VPSRLW    $8, Z1, Z5
	VMOVDQA64 Z25, Z6
	VPTERNLOGD $0xCA, Z4, Z0, Z6
	VMOVDQA64 Z25, Z7
	VPTERNLOGD $0xCA, Z5, Z1, Z7
	VPERMT2B  Z7, Z24, Z6
	VMOVDQU64 Z6, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	ADDQ $64, DX
	DECQ CX
	JNZ  sloop
sdone:
	VZEROUPPER
	RET

// func symsBF16AVX512(syms, src *byte, n64 int)
TEXT ·symsBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ syms+0(FP), DX
	MOVQ src+8(FP), SI
	MOVQ n64+16(FP), CX
	VMOVDQU64 sgather<>(SB), Z24
	TESTQ CX, CX
	JZ   ydone
yloop:
	VPSRLW    $7, (SI), Z2
	VPSRLW    $7, 64(SI), Z3
	VPERMT2B  Z3, Z24, Z2
	VMOVDQU64 Z2, (DX)
	ADDQ $128, SI
	ADDQ $64, DX
	DECQ CX
	JNZ  yloop
ydone:
	VZEROUPPER
	RET

// func mergeBF16AVX512(dst, r8, syms *byte, n64 int)
TEXT ·mergeBF16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ r8+8(FP), SI
	MOVQ syms+16(FP), DX
	MOVQ n64+24(FP), CX
	MOVQ $0x80, AX
	VPBROADCASTB AX, Z25
	VMOVDQU64 silv0<>(SB), Z24
	VMOVDQU64 silv1<>(SB), Z29
	TESTQ CX, CX
	JZ   mdone
mloop:
	VMOVDQU64 (DX), Z1 // e
	VMOVDQU64 (SI), Z4 // r
	VPSLLW    $7, Z1, Z5
	VMOVDQA64 Z25, Z6
	VPTERNLOGD $0xCA, Z4, Z5, Z6
	VPSRLW    $1, Z1, Z7
	VMOVDQA64 Z25, Z8
	VPTERNLOGD $0xCA, Z7, Z4, Z8
	VMOVDQA64 Z6, Z9
	VPERMT2B  Z8, Z24, Z9
	VPERMT2B  Z8, Z29, Z6
	VMOVDQU64 Z9, (DI)
	VMOVDQU64 Z6, 64(DI)
	ADDQ $128, DI
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JNZ  mloop
mdone:
	VZEROUPPER
	RET

// func splitBF16AVX2(r8, syms, src *byte, n32 int)
TEXT ·splitBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ r8+0(FP), DI
	MOVQ syms+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n32+24(FP), CX
	MOVQ $0x00ff, AX
	MOVQ AX, X11
	VPBROADCASTW X11, Y11
	MOVQ $0x007f, AX
	MOVQ AX, X10
	VPBROADCASTW X10, Y10
	MOVQ $0x0080, AX
	MOVQ AX, X9
	VPBROADCASTW X9, Y9
	TESTQ CX, CX
	JZ   s2done
s2loop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPSRLW  $7, Y0, Y2
	VPSRLW  $7, Y1, Y3
	VPAND   Y11, Y2, Y2
	VPAND   Y11, Y3, Y3
	VPACKUSWB Y3, Y2, Y2
	VPERMQ  $0xD8, Y2, Y2
	VMOVDQU Y2, (DX)
	VPSRLW  $8, Y0, Y4
	VPAND   Y9, Y4, Y4
	VPAND   Y10, Y0, Y0
	VPOR    Y4, Y0, Y0
	VPSRLW  $8, Y1, Y5
	VPAND   Y9, Y5, Y5
	VPAND   Y10, Y1, Y1
	VPOR    Y5, Y1, Y1
	VPACKUSWB Y1, Y0, Y0
	VPERMQ  $0xD8, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  s2loop
s2done:
	VZEROUPPER
	RET

// MASKSY sets Y8 to 0x7f and Y9 to 0x80 in every byte.
#define MASKSY \
	MOVQ $0x80, AX \
	MOVQ AX, X9 \
	VPBROADCASTB X9, Y9 \
	MOVQ $0x7f, AX \
	MOVQ AX, X8 \
	VPBROADCASTB X8, Y8

// MERGEY_BF16 rebuilds 64 output bytes (Y0, Y1) of 32 bfloat16 from 32
// symbol bytes at DX and 32 R8 bytes at SI (MASKSY's Y8, Y9).
#define MERGEY_BF16 \
	HALVESY \
	VPERMQ  $0xD8, Y3, Y3 \
	VPERMQ  $0xD8, Y4, Y4 \
	VPUNPCKLBW Y4, Y3, Y0 \
	VPUNPCKHBW Y4, Y3, Y1

// HALVESY builds the low (Y3) and high (Y4) bytes of 32 bfloat16 (or
// float32 high halves) from 32 symbol bytes at DX and 32 R8 bytes at SI.
#define HALVESY \
	VMOVDQU (DX), Y1 \
	VMOVDQU (SI), Y2 \
	VPSLLW  $7, Y1, Y3 \
	VPAND   Y9, Y3, Y3 \
	VPAND   Y8, Y2, Y4 \
	VPOR    Y4, Y3, Y3 \
	VPSRLW  $1, Y1, Y4 \
	VPAND   Y8, Y4, Y4 \
	VPAND   Y9, Y2, Y5 \
	VPOR    Y5, Y4, Y4

// func mergeBF16AVX2(dst, r8, syms *byte, n32 int)
TEXT ·mergeBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ r8+8(FP), SI
	MOVQ syms+16(FP), DX
	MOVQ n32+24(FP), CX
	MASKSY
	TESTQ CX, CX
	JZ   m2done
m2loop:
	MERGEY_BF16
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	ADDQ $64, DI
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  m2loop
m2done:
	VZEROUPPER
	RET

// MERGE64 rebuilds 128 output bytes (Z9, then Z6) from 64 symbol bytes at
// DX and 64 R8 bytes at SI, as mergeBF16AVX512's loop (Z24, Z29 the
// interleave tables, Z25 = 0x80s).
#define MERGE64 \
	VMOVDQU64  (DX), Z1 \
	VMOVDQU64  (SI), Z4 \
	VPSLLW     $7, Z1, Z5 \
	VMOVDQA64  Z25, Z6 \
	VPTERNLOGD $0xCA, Z4, Z5, Z6 \
	VPSRLW     $1, Z1, Z7 \
	VMOVDQA64  Z25, Z8 \
	VPTERNLOGD $0xCA, Z7, Z4, Z8 \
	VMOVDQA64  Z6, Z9 \
	VPERMT2B   Z8, Z24, Z9 \
	VPERMT2B   Z8, Z29, Z6

// FOLDR(A, B) folds the 128 bytes in A, B into the CRC accumulators Z11,
// Z12 (shift by 1024 bits, constants in Z17); Z18 holds the initial state
// until the first fold (zip3's FOLD2).
#define FOLDR(A, B) \
	VPCLMULQDQ $0x00, Z17, Z11, Z15 \
	VPCLMULQDQ $0x11, Z17, Z11, Z11 \
	VPTERNLOGD $0x96, Z15, A, Z11 \
	VPXORQ     Z18, Z11, Z11 \
	VPXORQ     Z18, Z18, Z18 \
	VPCLMULQDQ $0x00, Z17, Z12, Z16 \
	VPCLMULQDQ $0x11, Z17, Z12, Z12 \
	VPTERNLOGD $0x96, Z16, B, Z12

// FOLDFIN reduces the accumulators Z11 (older), Z12 (newer) to the 16-byte
// fold at (AX), constants at (R14) (zip3's FOLDFINISH).
#define FOLDFIN \
	VBROADCASTI32X4 16(R14), Z14 \
	VPCLMULQDQ $0x00, Z14, Z11, Z15 \
	VPCLMULQDQ $0x11, Z14, Z11, Z11 \
	VPTERNLOGD $0x96, Z15, Z12, Z11 \
	VEXTRACTI64X2 $1, Z11, X12 \
	VEXTRACTI64X2 $2, Z11, X13 \
	VEXTRACTI64X2 $3, Z11, X14 \
	VMOVDQU 32(R14), X15 \
	VPCLMULQDQ $0x00, X15, X11, X16 \
	VPCLMULQDQ $0x11, X15, X11, X11 \
	VPXORQ X16, X11, X11 \
	VMOVDQU 48(R14), X15 \
	VPCLMULQDQ $0x00, X15, X12, X16 \
	VPCLMULQDQ $0x11, X15, X12, X12 \
	VPXORQ X16, X12, X12 \
	VMOVDQU 64(R14), X15 \
	VPCLMULQDQ $0x00, X15, X13, X16 \
	VPCLMULQDQ $0x11, X15, X13, X13 \
	VPXORQ X16, X13, X13 \
	VPXORQ X11, X12, X11 \
	VPXORQ X13, X14, X13 \
	VPXORQ X11, X13, X11 \
	VMOVDQU X11, (AX)

// func mergeBF16CRCAVX512(dst, r8, syms *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// mergeBF16AVX512 that folds the output into a CRC-32C as it goes (state:
// the complemented CRC so far; out: the 16-byte fold for crc32c.FromFold),
// so the block is not read again for its checksum. nt != 0: non-temporal
// stores (dst 64-byte aligned), fenced at the end. The fold reduction is
// zip3's FOLDFINISH: k holds the constants for shifts by 1024, 512, 384,
// 256 and 128 bits.
// STORE2 writes the 128 bytes of a 16-bit step (Z9, Z6) at DI with I
// (VMOVDQU64 or VMOVNTDQ), folds them into the CRC, and moves DI and the
// two 64-byte planes (SI, DX) on.
#define STORE2(I) \
	I Z9, (DI) \
	I Z6, 64(DI) \
	FOLDR(Z9, Z6) \
	ADDQ $128, DI \
	ADDQ $64, SI \
	ADDQ $64, DX

TEXT ·mergeBF16CRCAVX512(SB), NOSPLIT, $0-57
	MOVQ    dst+0(FP), DI
	MOVQ    r8+8(FP), SI
	MOVQ    syms+16(FP), DX
	MOVQ    n64+24(FP), CX
	MOVL    state+32(FP), BX
	MOVQ    k+40(FP), R14
	MOVBQZX nt+56(FP), R8
	MOVQ    $0x80, AX
	VPBROADCASTB AX, Z25
	VMOVDQU64 silv0<>(SB), Z24
	VMOVDQU64 silv1<>(SB), Z29
	VBROADCASTI32X4 (R14), Z17
	VPXORQ  Z11, Z11, Z11
	VPXORQ  Z12, Z12, Z12
	VMOVD   BX, X18
	TESTQ   R8, R8
	JNZ     ntloop

cloop:
	MERGE64
	STORE2(VMOVDQU64)
	DECQ CX
	JNZ  cloop
	JMP  finish

ntloop:
	MERGE64
	STORE2(VMOVNTDQ)
	DECQ CX
	JNZ  ntloop
	SFENCE

finish:
	MOVQ out+48(FP), AX
	FOLDFIN
	VZEROUPPER
	RET

// word interleave tables (VPERMT2W): words 0..15, then 16..31, of two sources
DATA wilv0<>+0(SB)/8, $0x0021000100200000
DATA wilv0<>+8(SB)/8, $0x0023000300220002
DATA wilv0<>+16(SB)/8, $0x0025000500240004
DATA wilv0<>+24(SB)/8, $0x0027000700260006
DATA wilv0<>+32(SB)/8, $0x0029000900280008
DATA wilv0<>+40(SB)/8, $0x002b000b002a000a
DATA wilv0<>+48(SB)/8, $0x002d000d002c000c
DATA wilv0<>+56(SB)/8, $0x002f000f002e000e
GLOBL wilv0<>(SB), RODATA|NOPTR, $64
DATA wilv1<>+0(SB)/8, $0x0031001100300010
DATA wilv1<>+8(SB)/8, $0x0033001300320012
DATA wilv1<>+16(SB)/8, $0x0035001500340014
DATA wilv1<>+24(SB)/8, $0x0037001700360016
DATA wilv1<>+32(SB)/8, $0x0039001900380018
DATA wilv1<>+40(SB)/8, $0x003b001b003a001a
DATA wilv1<>+48(SB)/8, $0x003d001d003c001c
DATA wilv1<>+56(SB)/8, $0x003f001f003e001e
GLOBL wilv1<>(SB), RODATA|NOPTR, $64

// LOW4 builds the low halves of 64 float32 (Z10: elements 0..31, Z3:
// 32..63) from their byte planes: bits 7..0 at R10, 15..8 at R9.
#define LOW4 \
	VMOVDQU64  (R9), Z2 \
	VMOVDQU64  (R10), Z10 \
	VMOVDQA64  Z10, Z3 \
	VPERMT2B   Z2, Z24, Z10 \
	VPERMT2B   Z2, Z29, Z3

// PAIRW pairs the low halves (Z10, Z3) with MERGE64's high halves (Z9, Z6)
// into 256 output bytes: Z5, Z10, Z7, Z3.
#define PAIRW \
	VMOVDQA64  Z10, Z5 \
	VPERMT2W   Z9, Z26, Z5 \
	VPERMT2W   Z9, Z27, Z10 \
	VMOVDQA64  Z3, Z7 \
	VPERMT2W   Z6, Z26, Z7 \
	VPERMT2W   Z6, Z27, Z3

// MERGE32 rebuilds 256 output bytes (Z5, Z10, Z7, Z3) of 64 float32 from
// their planes: exponent bytes at DX, sign|mantissa-top at SI, mantissa
// bits 15..8 at R9 and 7..0 at R10.
#define MERGE32 \
	MERGE64 \
	LOW4 \
	PAIRW

// STORE4 writes the 256 bytes of a float32 step at DI with I (VMOVDQU64
// or VMOVNTDQ), folds them into the CRC, and moves DI and the 64-byte
// planes at SI and DX on (each kernel moves its low-half planes).
#define STORE4(I) \
	I Z5, (DI) \
	I Z10, 64(DI) \
	I Z7, 128(DI) \
	I Z3, 192(DI) \
	FOLDR(Z5, Z10) \
	FOLDR(Z7, Z3) \
	ADDQ $256, DI \
	ADDQ $64, SI \
	ADDQ $64, DX

// CRCSET loads the merge tables and fold constants (R14) and the initial
// state (BX).
#define CRCSET \
	MOVQ    $0x80, AX \
	VPBROADCASTB AX, Z25 \
	VMOVDQU64 silv0<>(SB), Z24 \
	VMOVDQU64 silv1<>(SB), Z29 \
	VMOVDQU64 wilv0<>(SB), Z26 \
	VMOVDQU64 wilv1<>(SB), Z27 \
	VBROADCASTI32X4 (R14), Z17 \
	VPXORQ  Z11, Z11, Z11 \
	VPXORQ  Z12, Z12, Z12 \
	VMOVD   BX, X18

// func mergeFP32CRCAVX512(dst, p0, p1, p2, p3 *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// The float32 counterpart of mergeBF16CRCAVX512: 64 elements a step from
// the four byte planes of huff2, 256 bytes written and folded into the CRC.
TEXT ·mergeFP32CRCAVX512(SB), NOSPLIT, $0-73
	MOVQ    dst+0(FP), DI
	MOVQ    p0+8(FP), DX
	MOVQ    p1+16(FP), SI
	MOVQ    p2+24(FP), R9
	MOVQ    p3+32(FP), R10
	MOVQ    n64+40(FP), CX
	MOVL    state+48(FP), BX
	MOVQ    k+56(FP), R14
	MOVBQZX nt+72(FP), R8
	CRCSET
	TESTQ   R8, R8
	JNZ     nt32

c32:
	MERGE32
	STORE4(VMOVDQU64)
	ADDQ $64, R9
	ADDQ $64, R10
	DECQ CX
	JNZ  c32
	JMP  fin32

nt32:
	MERGE32
	STORE4(VMOVNTDQ)
	ADDQ $64, R9
	ADDQ $64, R10
	DECQ CX
	JNZ  nt32
	SFENCE

fin32:
	MOVQ out+64(FP), AX
	FOLDFIN
	VZEROUPPER
	RET

// func mergeFP32WCRCAVX512(dst, syms, r8, r16 *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// mergeFP32CRCAVX512 for huff's float32 blocks, whose low halves come as
// 16-bit words (R16).
TEXT ·mergeFP32WCRCAVX512(SB), NOSPLIT, $0-65
	MOVQ    dst+0(FP), DI
	MOVQ    syms+8(FP), DX
	MOVQ    r8+16(FP), SI
	MOVQ    r16+24(FP), R9
	MOVQ    n64+32(FP), CX
	MOVL    state+40(FP), BX
	MOVQ    k+48(FP), R14
	MOVBQZX nt+64(FP), R8
	CRCSET
	TESTQ   R8, R8
	JNZ     ntw

cw:
	MERGE64
	VMOVDQU64 (R9), Z10
	VMOVDQU64 64(R9), Z3
	PAIRW
	STORE4(VMOVDQU64)
	ADDQ $128, R9
	DECQ CX
	JNZ  cw
	JMP  finw

ntw:
	MERGE64
	VMOVDQU64 (R9), Z10
	VMOVDQU64 64(R9), Z3
	PAIRW
	STORE4(VMOVNTDQ)
	ADDQ $128, R9
	DECQ CX
	JNZ  ntw
	SFENCE

finw:
	MOVQ out+56(FP), AX
	FOLDFIN
	VZEROUPPER
	RET

// func mergeFP16CRCAVX512(dst, lo, hi *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// Interleaves 64 low and 64 high bytes a step into float16 (huff's float16
// blocks: R8 and the symbols), folding the output into the CRC.
// INTERLEAVE16 interleaves 64 low bytes (SI) and 64 high bytes (DX) into
// 64 float16: Z9, Z6.
#define INTERLEAVE16 \
	VMOVDQU64 (SI), Z9 \
	VMOVDQU64 (DX), Z8 \
	VMOVDQA64 Z9, Z6 \
	VPERMT2B  Z8, Z24, Z9 \
	VPERMT2B  Z8, Z29, Z6

TEXT ·mergeFP16CRCAVX512(SB), NOSPLIT, $0-57
	MOVQ    dst+0(FP), DI
	MOVQ    lo+8(FP), SI
	MOVQ    hi+16(FP), DX
	MOVQ    n64+24(FP), CX
	MOVL    state+32(FP), BX
	MOVQ    k+40(FP), R14
	MOVBQZX nt+56(FP), R8
	CRCSET
	TESTQ   R8, R8
	JNZ     nt16

c16:
	INTERLEAVE16
	STORE2(VMOVDQU64)
	DECQ CX
	JNZ  c16
	JMP  fin16

nt16:
	INTERLEAVE16
	STORE2(VMOVNTDQ)
	DECQ CX
	JNZ  nt16
	SFENCE

fin16:
	MOVQ out+48(FP), AX
	FOLDFIN
	VZEROUPPER
	RET

// The AVX2 counterparts of the two-plane merge+CRC kernels, for CPUs with
// VPCLMULQDQ on 256-bit registers but no AVX-512 (AMD Zen 3, Intel Ice
// Lake client): 32 elements (64 output bytes) a step, folded into two
// 256-bit accumulators, so each 16-byte lane is folded by 512 bits a step.
// Without them the block is merged, then read again for its checksum
// (on a Zen 3 the two passes took 14 % and 10 % of huff2's float16 decode).

// MERGEY_FP16 interleaves 32 low bytes at SI with 32 high bytes at DX into
// 64 output bytes (Y0, Y1), as vperm.JoinBytesAVX2.
#define MERGEY_FP16 \
	VMOVDQU (SI), Y3 \
	VMOVDQU (DX), Y4 \
	VPERMQ  $0xD8, Y3, Y3 \
	VPERMQ  $0xD8, Y4, Y4 \
	VPUNPCKLBW Y4, Y3, Y0 \
	VPUNPCKHBW Y4, Y3, Y1

// STOREY(I) writes Y0, Y1 at DI with I (VMOVDQU or VMOVNTDQ), folds them
// into the accumulators Y11, Y12 (shift by 512 bits, constants in Y13; Y14
// holds the initial state until the first fold), and moves DI, SI and DX
// on.
#define STOREY(I) \
	I Y0, (DI) \
	I Y1, 32(DI) \
	FOLDY(Y0, Y1) \
	ADDQ $64, DI \
	ADDQ $32, SI \
	ADDQ $32, DX

// FOLDY(A, B) folds the next 64 output bytes (A, B, clobbered) into Y11,
// Y12. The state joins A off the accumulators' chain (multiply, two XORs).
#define FOLDY(A, B) \
	VPXOR      Y14, A, A \
	VPXOR      Y14, Y14, Y14 \
	VPCLMULQDQ $0x00, Y13, Y11, Y15 \
	VPCLMULQDQ $0x11, Y13, Y11, Y11 \
	VPXOR      Y15, A, A \
	VPXOR      A, Y11, Y11 \
	VPCLMULQDQ $0x00, Y13, Y12, Y10 \
	VPCLMULQDQ $0x11, Y13, Y12, Y12 \
	VPXOR      Y10, B, B \
	VPXOR      B, Y12, Y12

// FOLDFINY reduces the four lanes of Y11, Y12 (oldest first) to the 16-byte
// fold at (AX): lanes 0, 1 and 2 shifted by 384, 256 and 128 bits
// (constants at 32, 48 and 64(R14)) onto lane 3.
#define FOLDFINY \
	VEXTRACTI128 $1, Y11, X2 \
	VEXTRACTI128 $1, Y12, X3 \
	SHIFT128(32, X11) \
	SHIFT128(48, X2) \
	SHIFT128(64, X12) \
	VPXOR      X11, X2, X2 \
	VPXOR      X12, X3, X3 \
	VPXOR      X2, X3, X3 \
	VMOVDQU    X3, (AX)

// SHIFT128(OFF, X) multiplies lane X by the fold constants at OFF(R14).
#define SHIFT128(OFF, X) \
	VMOVDQU    OFF(R14), X4 \
	VPCLMULQDQ $0x00, X4, X, X5 \
	VPCLMULQDQ $0x11, X4, X, X \
	VPXOR      X5, X, X

// CRCSETY loads the merge masks, the fold constants (R14) and the initial
// state (BX).
#define CRCSETY \
	MASKSY \
	VBROADCASTI128 16(R14), Y13 \
	VPXOR   Y11, Y11, Y11 \
	VPXOR   Y12, Y12, Y12 \
	VMOVD   BX, X14

// func mergeBF16CRCAVX2(dst, r8, syms *byte, n32 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// mergeBF16AVX2 folding the output into a CRC-32C as it goes (state: the
// complemented CRC so far; out: the 16-byte fold for crc32c.FromFold).
// nt != 0: non-temporal stores (dst 32-byte aligned), fenced at the end.
TEXT ·mergeBF16CRCAVX2(SB), NOSPLIT, $0-57
	MOVQ    dst+0(FP), DI
	MOVQ    r8+8(FP), SI
	MOVQ    syms+16(FP), DX
	MOVQ    n32+24(FP), CX
	MOVL    state+32(FP), BX
	MOVQ    k+40(FP), R14
	MOVBQZX nt+56(FP), R8
	CRCSETY
	TESTQ   R8, R8
	JNZ     ntyb

cyb:
	MERGEY_BF16
	STOREY(VMOVDQU)
	DECQ CX
	JNZ  cyb
	JMP  finyb

ntyb:
	MERGEY_BF16
	STOREY(VMOVNTDQ)
	DECQ CX
	JNZ  ntyb
	SFENCE

finyb:
	MOVQ out+48(FP), AX
	FOLDFINY
	VZEROUPPER
	RET

// func mergeFP16CRCAVX2(dst, lo, hi *byte, n32 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// vperm.JoinBytesAVX2 (huff's float16) folding the output into a CRC-32C,
// as mergeBF16CRCAVX2.
TEXT ·mergeFP16CRCAVX2(SB), NOSPLIT, $0-57
	MOVQ    dst+0(FP), DI
	MOVQ    lo+8(FP), SI
	MOVQ    hi+16(FP), DX
	MOVQ    n32+24(FP), CX
	MOVL    state+32(FP), BX
	MOVQ    k+40(FP), R14
	MOVBQZX nt+56(FP), R8
	CRCSETY
	TESTQ   R8, R8
	JNZ     nty16

cy16:
	MERGEY_FP16
	STOREY(VMOVDQU)
	DECQ CX
	JNZ  cy16
	JMP  finy16

nty16:
	MERGEY_FP16
	STOREY(VMOVNTDQ)
	DECQ CX
	JNZ  nty16
	SFENCE

finy16:
	MOVQ out+48(FP), AX
	FOLDFINY
	VZEROUPPER
	RET

// MERGEY_FP32 rebuilds 128 output bytes (Y0, Y1, Y2, Y5: elements 0..7,
// 8..15, 16..23, 24..31) of 32 float32 from their byte planes: exponent
// bytes at DX, sign|mantissa-top at SI, bits 15..8 at R9 and 7..0 at R10.
// The unpacks work within 128-bit lanes (elements 0..15 in the low lanes,
// 16..31 in the high), so the last step swaps lanes.
#define MERGEY_FP32 \
	HALVESY \
	VMOVDQU    (R9), Y6 \
	VMOVDQU    (R10), Y7 \
	VPUNPCKLBW Y6, Y7, Y0 \
	VPUNPCKHBW Y6, Y7, Y1 \
	VPUNPCKLBW Y4, Y3, Y2 \
	VPUNPCKHBW Y4, Y3, Y5 \
	VPUNPCKLWD Y2, Y0, Y3 \
	VPUNPCKHWD Y2, Y0, Y4 \
	VPUNPCKLWD Y5, Y1, Y6 \
	VPUNPCKHWD Y5, Y1, Y7 \
	VPERM2I128 $0x20, Y4, Y3, Y0 \
	VPERM2I128 $0x20, Y7, Y6, Y1 \
	VPERM2I128 $0x31, Y4, Y3, Y2 \
	VPERM2I128 $0x31, Y7, Y6, Y5

// STOREY4(I) writes MERGEY_FP32's 128 bytes at DI with I, folds them, and
// moves DI and the four planes on.
#define STOREY4(I) \
	I Y0, (DI) \
	I Y1, 32(DI) \
	I Y2, 64(DI) \
	I Y5, 96(DI) \
	FOLDY(Y0, Y1) \
	FOLDY(Y2, Y5) \
	ADDQ $128, DI \
	ADDQ $32, SI \
	ADDQ $32, DX \
	ADDQ $32, R9 \
	ADDQ $32, R10

// func mergeFP32CRCAVX2(dst, p0, p1, p2, p3 *byte, n32 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)
//
// The float32 counterpart of mergeBF16CRCAVX2: 32 elements a step from
// huff2's four planes (FORMAT.md 4a).
TEXT ·mergeFP32CRCAVX2(SB), NOSPLIT, $0-73
	MOVQ    dst+0(FP), DI
	MOVQ    p0+8(FP), DX
	MOVQ    p1+16(FP), SI
	MOVQ    p2+24(FP), R9
	MOVQ    p3+32(FP), R10
	MOVQ    n32+40(FP), CX
	MOVL    state+48(FP), BX
	MOVQ    k+56(FP), R14
	MOVBQZX nt+72(FP), R8
	CRCSETY
	TESTQ   R8, R8
	JNZ     nty32

cy32:
	MERGEY_FP32
	STOREY4(VMOVDQU)
	DECQ CX
	JNZ  cy32
	JMP  finy32

nty32:
	MERGEY_FP32
	STOREY4(VMOVNTDQ)
	DECQ CX
	JNZ  nty32
	SFENCE

finy32:
	MOVQ out+64(FP), AX
	FOLDFINY
	VZEROUPPER
	RET

// func mergeFP32AVX2(dst, p0, p1, p2, p3 *byte, n32 int)
//
// MERGEY_FP32 without the checksum, for AVX2 CPUs without VPCLMULQDQ.
TEXT ·mergeFP32AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), DX
	MOVQ p1+16(FP), SI
	MOVQ p2+24(FP), R9
	MOVQ p3+32(FP), R10
	MOVQ n32+40(FP), CX
	MASKSY
	TESTQ CX, CX
	JZ   m32done

m32loop:
	MERGEY_FP32
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y5, 96(DI)
	ADDQ $128, DI
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  m32loop

m32done:
	VZEROUPPER
	RET
