//go:build amd64 && !purego

#include "textflag.h"

// bfloat16 and float16 sums: widen to float32, add (a as the first source,
// as in the portable code), round back to the 16-bit format.

DATA bf16one<>+0(SB)/4, $0x00000001
GLOBL bf16one<>(SB), RODATA|NOPTR, $4
DATA bf16bias<>+0(SB)/4, $0x00007fff
GLOBL bf16bias<>(SB), RODATA|NOPTR, $4
DATA bf16nan<>+0(SB)/4, $0x7fc00000
GLOBL bf16nan<>(SB), RODATA|NOPTR, $4

// ROUND_BF16 turns the float32 lanes of X into bfloat16 values in the low
// halves of the lanes, like dtype.F32ToBF16: x + 0x7FFF + ((x>>16)&1), then
// >>16, with NaN lanes replaced by 0x7FC0. ONE, BIAS, NAN hold the
// broadcast constants; T is scratch.
#define ROUND_BF16_AVX2(X, T, ONE, BIAS, NAN) \
	VPSRLD    $16, X, T         \
	VPAND     ONE, T, T         \
	VPADDD    BIAS, T, T        \
	VPADDD    X, T, T           \
	VCMPPS    $3, X, X, X       \ // X = unordered(x, x): all-ones where NaN
	VPBLENDVB X, NAN, T, X      \
	VPSRLD    $16, X, X

// func sumBF16AVX2(dst, a, b *byte, n int)
// 16 elements (32 bytes) per step. Unpacking each 128-bit lane's low and high
// words against zero gives float32s (the bf16 bits in the upper halves);
// vpackusdw undoes exactly that lane order, so no permutes are needed.
TEXT ·sumBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	VPXOR        Y15, Y15, Y15
	VPBROADCASTD bf16one<>(SB), Y14
	VPBROADCASTD bf16bias<>(SB), Y13
	VPBROADCASTD bf16nan<>(SB), Y12

loop:
	VMOVDQU    (SI)(AX*1), Y0
	VMOVDQU    (DX)(AX*1), Y1
	VPUNPCKLWD Y0, Y15, Y2
	VPUNPCKHWD Y0, Y15, Y3
	VPUNPCKLWD Y1, Y15, Y4
	VPUNPCKHWD Y1, Y15, Y5
	VADDPS     Y4, Y2, Y2
	VADDPS     Y5, Y3, Y3
	ROUND_BF16_AVX2(Y2, Y6, Y14, Y13, Y12)
	ROUND_BF16_AVX2(Y3, Y7, Y14, Y13, Y12)
	VPACKUSDW  Y3, Y2, Y2
	VMOVDQU    Y2, (DI)(AX*1)
	ADDQ       $32, AX
	CMPQ       AX, CX
	JB         loop
	VZEROUPPER
	RET

// ROUND_BF16_AVX512 is ROUND_BF16_AVX2 for 16 lanes; K is a mask register.
#define ROUND_BF16_AVX512(X, T, K, ONE, BIAS, NAN) \
	VPSRLD    $16, X, T         \
	VPANDD    ONE, T, T         \
	VPADDD    BIAS, T, T        \
	VPADDD    X, T, T           \
	VCMPPS    $3, X, X, K       \
	VMOVDQA32 NAN, K, T         \
	VPSRLD    $16, T, X

// func sumBF16AVX512(dst, a, b *byte, n int)
// 32 elements (64 bytes) per step, as in the AVX2 version.
TEXT ·sumBF16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	VPXORD       Z15, Z15, Z15
	VPBROADCASTD bf16one<>(SB), Z14
	VPBROADCASTD bf16bias<>(SB), Z13
	VPBROADCASTD bf16nan<>(SB), Z12

loop:
	VMOVDQU16  (SI)(AX*1), Z0
	VMOVDQU16  (DX)(AX*1), Z1
	VPUNPCKLWD Z0, Z15, Z2
	VPUNPCKHWD Z0, Z15, Z3
	VPUNPCKLWD Z1, Z15, Z4
	VPUNPCKHWD Z1, Z15, Z5
	VADDPS     Z4, Z2, Z2
	VADDPS     Z5, Z3, Z3
	ROUND_BF16_AVX512(Z2, Z6, K1, Z14, Z13, Z12)
	ROUND_BF16_AVX512(Z3, Z7, K2, Z14, Z13, Z12)
	VPACKUSDW  Z3, Z2, Z2
	VMOVDQU16  Z2, (DI)(AX*1)
	ADDQ       $64, AX
	CMPQ       AX, CX
	JB         loop
	VZEROUPPER
	RET

// func sumF16AVX2(dst, a, b *byte, n int)
// 16 elements (32 bytes) per step with F16C. vcvtph2ps and vcvtps2ph (round
// to nearest even, immediate 0) convert exactly as dtype.F16ToF32 and
// dtype.F32ToF16 do, NaN payloads included, and vaddps's NaN choice is the
// x86 rule the portable kernel applies explicitly.
TEXT ·sumF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	VCVTPH2PS (SI)(AX*1), Y0
	VCVTPH2PS 16(SI)(AX*1), Y1
	VCVTPH2PS (DX)(AX*1), Y2
	VCVTPH2PS 16(DX)(AX*1), Y3
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (DI)(AX*1)
	VMOVDQU   X1, 16(DI)(AX*1)
	ADDQ      $32, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET
