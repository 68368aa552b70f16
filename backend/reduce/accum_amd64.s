//go:build amd64 && !purego

#include "textflag.h"

// Float32 accumulation kernels (accum.go), AVX2 + F16C. Every routine
// handles n elements, n a positive multiple of 16, eight per vector, two
// vectors per step. The float32 operation always has the left operand
// (the accumulator, or a) as its first source, so the NaN it produces is the
// x86 rule that the portable code applies explicitly.
//
// Widening: bfloat16 is zero-extended to 32 bits and shifted into the upper
// half (exact); float16 uses vcvtph2ps (exact, NaNs quieted as
// dtype.F16ToF32 does). Narrowing: bfloat16 rounds to nearest even with NaN
// replaced by 0x7FC0 (dtype.F32ToBF16); float16 uses vcvtps2ph with
// immediate 0 (round to nearest even, as dtype.F32ToF16, NaN payloads
// included).

DATA accone<>+0(SB)/4, $0x00000001
GLOBL accone<>(SB), RODATA|NOPTR, $4
DATA accbias<>+0(SB)/4, $0x00007fff
GLOBL accbias<>(SB), RODATA|NOPTR, $4
DATA accnan<>+0(SB)/4, $0x7fc00000
GLOBL accnan<>(SB), RODATA|NOPTR, $4

// WIDEN_BF16 loads 8 bfloat16 values at M as float32 into Y.
#define WIDEN_BF16(M, Y) \
	VPMOVZXWD M, Y    \
	VPSLLD    $16, Y, Y

// WIDEN_F16 loads 8 float16 values at M as float32 into Y.
#define WIDEN_F16(M, Y) \
	VCVTPH2PS M, Y

// ROUND_BF16 turns the float32 lanes of X into bfloat16 values in the low
// halves of the lanes (see dtype.F32ToBF16); T is scratch.
#define ROUND_BF16(X, T) \
	VPSRLD    $16, X, T    \
	VPAND     Y14, T, T    \
	VPADDD    Y13, T, T    \
	VPADDD    X, T, T      \
	VCMPPS    $3, X, X, X  \
	VPBLENDVB X, Y12, T, X \
	VPSRLD    $16, X, X

#define BF16_CONSTS \
	VPBROADCASTD accone<>(SB), Y14  \
	VPBROADCASTD accbias<>(SB), Y13 \
	VPBROADCASTD accnan<>(SB), Y12

// func accInitBF16AddAVX2(acc *float32, a, b *byte, n int)
TEXT ·accInitBF16AddAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	WIDEN_BF16((SI)(AX*2), Y0)
	WIDEN_BF16(16(SI)(AX*2), Y1)
	WIDEN_BF16((DX)(AX*2), Y2)
	WIDEN_BF16(16(DX)(AX*2), Y3)
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accumBF16AddAVX2(acc *float32, src *byte, n int)
TEXT ·accumBF16AddAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_BF16((SI)(AX*2), Y2)
	WIDEN_BF16(16(SI)(AX*2), Y3)
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accFinishBF16AddAVX2(dst *byte, acc *float32, src *byte, n int)
TEXT ·accFinishBF16AddAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	XORQ AX, AX
	BF16_CONSTS

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_BF16((SI)(AX*2), Y2)
	WIDEN_BF16(16(SI)(AX*2), Y3)
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	ROUND_BF16(Y0, Y4)
	ROUND_BF16(Y1, Y5)
	VPACKUSDW Y1, Y0, Y0
	VPERMQ    $0xD8, Y0, Y0
	VMOVDQU   Y0, (BX)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accInitBF16MulAVX2(acc *float32, a, b *byte, n int)
TEXT ·accInitBF16MulAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	WIDEN_BF16((SI)(AX*2), Y0)
	WIDEN_BF16(16(SI)(AX*2), Y1)
	WIDEN_BF16((DX)(AX*2), Y2)
	WIDEN_BF16(16(DX)(AX*2), Y3)
	VMULPS    Y2, Y0, Y0
	VMULPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accumBF16MulAVX2(acc *float32, src *byte, n int)
TEXT ·accumBF16MulAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_BF16((SI)(AX*2), Y2)
	WIDEN_BF16(16(SI)(AX*2), Y3)
	VMULPS    Y2, Y0, Y0
	VMULPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accFinishBF16MulAVX2(dst *byte, acc *float32, src *byte, n int)
TEXT ·accFinishBF16MulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	XORQ AX, AX
	BF16_CONSTS

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_BF16((SI)(AX*2), Y2)
	WIDEN_BF16(16(SI)(AX*2), Y3)
	VMULPS    Y2, Y0, Y0
	VMULPS    Y3, Y1, Y1
	ROUND_BF16(Y0, Y4)
	ROUND_BF16(Y1, Y5)
	VPACKUSDW Y1, Y0, Y0
	VPERMQ    $0xD8, Y0, Y0
	VMOVDQU   Y0, (BX)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accInitF16AddAVX2(acc *float32, a, b *byte, n int)
TEXT ·accInitF16AddAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	WIDEN_F16((SI)(AX*2), Y0)
	WIDEN_F16(16(SI)(AX*2), Y1)
	WIDEN_F16((DX)(AX*2), Y2)
	WIDEN_F16(16(DX)(AX*2), Y3)
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accumF16AddAVX2(acc *float32, src *byte, n int)
TEXT ·accumF16AddAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_F16((SI)(AX*2), Y2)
	WIDEN_F16(16(SI)(AX*2), Y3)
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accFinishF16AddAVX2(dst *byte, acc *float32, src *byte, n int)
TEXT ·accFinishF16AddAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_F16((SI)(AX*2), Y2)
	WIDEN_F16(16(SI)(AX*2), Y3)
	VADDPS    Y2, Y0, Y0
	VADDPS    Y3, Y1, Y1
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (BX)(AX*2)
	VMOVDQU   X1, 16(BX)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accInitF16MulAVX2(acc *float32, a, b *byte, n int)
TEXT ·accInitF16MulAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	WIDEN_F16((SI)(AX*2), Y0)
	WIDEN_F16(16(SI)(AX*2), Y1)
	WIDEN_F16((DX)(AX*2), Y2)
	WIDEN_F16(16(DX)(AX*2), Y3)
	VMULPS    Y2, Y0, Y0
	VMULPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accumF16MulAVX2(acc *float32, src *byte, n int)
TEXT ·accumF16MulAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_F16((SI)(AX*2), Y2)
	WIDEN_F16(16(SI)(AX*2), Y3)
	VMULPS    Y2, Y0, Y0
	VMULPS    Y3, Y1, Y1
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func accFinishF16MulAVX2(dst *byte, acc *float32, src *byte, n int)
TEXT ·accFinishF16MulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	WIDEN_F16((SI)(AX*2), Y2)
	WIDEN_F16(16(SI)(AX*2), Y3)
	VMULPS    Y2, Y0, Y0
	VMULPS    Y3, Y1, Y1
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (BX)(AX*2)
	VMOVDQU   X1, 16(BX)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func narrowBF16AVX2(dst *byte, acc *float32, n int)
TEXT ·narrowBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	BF16_CONSTS

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	ROUND_BF16(Y0, Y4)
	ROUND_BF16(Y1, Y5)
	VPACKUSDW Y1, Y0, Y0
	VPERMQ    $0xD8, Y0, Y0
	VMOVDQU   Y0, (BX)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func narrowF16AVX2(dst *byte, acc *float32, n int)
TEXT ·narrowF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS   (DI)(AX*4), Y0
	VMOVUPS   32(DI)(AX*4), Y1
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (BX)(AX*2)
	VMOVDQU   X1, 16(BX)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func widenBF16AVX2(acc *float32, src *byte, n int)
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	WIDEN_BF16((SI)(AX*2), Y0)
	WIDEN_BF16(16(SI)(AX*2), Y1)
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET

// func widenF16AVX2(acc *float32, src *byte, n int)
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	WIDEN_F16((SI)(AX*2), Y0)
	WIDEN_F16(16(SI)(AX*2), Y1)
	VMOVUPS   Y0, (DI)(AX*4)
	VMOVUPS   Y1, 32(DI)(AX*4)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        loop
	VZEROUPPER
	RET
