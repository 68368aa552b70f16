//go:build amd64 && !purego

#include "textflag.h"

// dst = a OP b for n bytes. OP is a packed add whose first source is the
// register holding a, so NaN propagation matches the portable Go code
// (x86 returns the first source operand's NaN). Four vectors per iteration,
// then one at a time.

// func(dst, a, b *byte, n int), n a positive multiple of 32.
#define SUM_AVX2(OP) \
	MOVQ dst+0(FP), DI          \
	MOVQ a+8(FP), SI            \
	MOVQ b+16(FP), DX           \
	MOVQ n+24(FP), CX           \
	XORQ AX, AX                 \
	MOVQ CX, BX                 \
	ANDQ $-128, BX              \
	JZ   one                    \
four:                           \
	VMOVDQU (SI)(AX*1), Y0      \
	VMOVDQU 32(SI)(AX*1), Y1    \
	VMOVDQU 64(SI)(AX*1), Y2    \
	VMOVDQU 96(SI)(AX*1), Y3    \
	OP      (DX)(AX*1), Y0, Y0  \
	OP      32(DX)(AX*1), Y1, Y1 \
	OP      64(DX)(AX*1), Y2, Y2 \
	OP      96(DX)(AX*1), Y3, Y3 \
	VMOVDQU Y0, (DI)(AX*1)      \
	VMOVDQU Y1, 32(DI)(AX*1)    \
	VMOVDQU Y2, 64(DI)(AX*1)    \
	VMOVDQU Y3, 96(DI)(AX*1)    \
	ADDQ $128, AX               \
	CMPQ AX, BX                 \
	JB   four                   \
one:                            \
	CMPQ AX, CX                 \
	JAE  done                   \
	VMOVDQU (SI)(AX*1), Y0      \
	OP      (DX)(AX*1), Y0, Y0  \
	VMOVDQU Y0, (DI)(AX*1)      \
	ADDQ $32, AX                \
	JMP  one                    \
done:                           \
	VZEROUPPER                  \
	RET

// func(dst, a, b *byte, n int), n a positive multiple of 64.
#define SUM_AVX512(OP) \
	MOVQ dst+0(FP), DI            \
	MOVQ a+8(FP), SI              \
	MOVQ b+16(FP), DX             \
	MOVQ n+24(FP), CX             \
	XORQ AX, AX                   \
	MOVQ CX, BX                   \
	ANDQ $-256, BX                \
	JZ   one                      \
four:                             \
	VMOVDQU64 (SI)(AX*1), Z0      \
	VMOVDQU64 64(SI)(AX*1), Z1    \
	VMOVDQU64 128(SI)(AX*1), Z2   \
	VMOVDQU64 192(SI)(AX*1), Z3   \
	OP        (DX)(AX*1), Z0, Z0  \
	OP        64(DX)(AX*1), Z1, Z1 \
	OP        128(DX)(AX*1), Z2, Z2 \
	OP        192(DX)(AX*1), Z3, Z3 \
	VMOVDQU64 Z0, (DI)(AX*1)      \
	VMOVDQU64 Z1, 64(DI)(AX*1)    \
	VMOVDQU64 Z2, 128(DI)(AX*1)   \
	VMOVDQU64 Z3, 192(DI)(AX*1)   \
	ADDQ $256, AX                 \
	CMPQ AX, BX                   \
	JB   four                     \
one:                              \
	CMPQ AX, CX                   \
	JAE  done                     \
	VMOVDQU64 (SI)(AX*1), Z0      \
	OP        (DX)(AX*1), Z0, Z0  \
	VMOVDQU64 Z0, (DI)(AX*1)      \
	ADDQ $64, AX                  \
	JMP  one                      \
done:                             \
	VZEROUPPER                    \
	RET

// func sumF32AVX2(dst, a, b *byte, n int)
TEXT ·sumF32AVX2(SB), NOSPLIT, $0-32
	SUM_AVX2(VADDPS)

// func sumF64AVX2(dst, a, b *byte, n int)
TEXT ·sumF64AVX2(SB), NOSPLIT, $0-32
	SUM_AVX2(VADDPD)

// func sumI32AVX2(dst, a, b *byte, n int)
TEXT ·sumI32AVX2(SB), NOSPLIT, $0-32
	SUM_AVX2(VPADDD)

// func sumI64AVX2(dst, a, b *byte, n int)
TEXT ·sumI64AVX2(SB), NOSPLIT, $0-32
	SUM_AVX2(VPADDQ)

// func sumF32AVX512(dst, a, b *byte, n int)
TEXT ·sumF32AVX512(SB), NOSPLIT, $0-32
	SUM_AVX512(VADDPS)

// func sumF64AVX512(dst, a, b *byte, n int)
TEXT ·sumF64AVX512(SB), NOSPLIT, $0-32
	SUM_AVX512(VADDPD)

// func sumI32AVX512(dst, a, b *byte, n int)
TEXT ·sumI32AVX512(SB), NOSPLIT, $0-32
	SUM_AVX512(VPADDD)

// func sumI64AVX512(dst, a, b *byte, n int)
TEXT ·sumI64AVX512(SB), NOSPLIT, $0-32
	SUM_AVX512(VPADDQ)
