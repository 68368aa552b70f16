//go:build amd64 && !purego

#include "textflag.h"

// float32 minimum and maximum with the portable kernels' semantics: a NaN
// operand is returned bit for bit (a's if both are NaN), and equal values
// give a|b for the minimum (so min(-0, +0) = -0) and a&b for the maximum.
//
// vminps/vmaxps return their second source when the operands are equal or
// either is NaN, so combining (a op b) with (b op a) by OR (min) or AND (max)
// fixes the zeros, and two blends then put back the NaN operands, a last.
#define MINMAX_AVX2(OP, COMBINE) \
	MOVQ dst+0(FP), DI          \
	MOVQ a+8(FP), SI            \
	MOVQ b+16(FP), DX           \
	MOVQ n+24(FP), CX           \
	XORQ AX, AX                 \
loop:                           \
	VMOVUPS   (SI)(AX*1), Y0    \
	VMOVUPS   (DX)(AX*1), Y1    \
	OP        Y1, Y0, Y2        \ // Y2 = op(a, b)
	OP        Y0, Y1, Y3        \ // Y3 = op(b, a)
	COMBINE   Y3, Y2, Y2        \
	VCMPPS    $3, Y1, Y1, Y4    \ // b is NaN
	VBLENDVPS Y4, Y1, Y2, Y2    \
	VCMPPS    $3, Y0, Y0, Y5    \ // a is NaN
	VBLENDVPS Y5, Y0, Y2, Y2    \
	VMOVUPS   Y2, (DI)(AX*1)    \
	ADDQ      $32, AX           \
	CMPQ      AX, CX            \
	JB        loop              \
	VZEROUPPER                  \
	RET

// func minF32AVX2(dst, a, b *byte, n int)
TEXT ·minF32AVX2(SB), NOSPLIT, $0-32
	MINMAX_AVX2(VMINPS, VORPS)

// func maxF32AVX2(dst, a, b *byte, n int)
TEXT ·maxF32AVX2(SB), NOSPLIT, $0-32
	MINMAX_AVX2(VMAXPS, VANDPS)
