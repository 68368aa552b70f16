//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (+ F16C) pieces of the fp8 coding (fp8.go), one block of n = B
// elements at a time (B a power of two, 32 to 1024). Every float32
// operation is the portable code's, operand for operand where order can
// matter, and none is fused: a product and a sum are two roundings. Only
// commutations (a+b as b+a, a-b as a+(-b)) differ, which IEEE arithmetic
// makes bit-exact for every non-NaN operand; the encoder sends a block
// whose transform holds a NaN exact whatever its bits, and the decoder's
// values are never NaN.

// The sign masks of the in-register butterflies: at stride h, the lanes i
// with i & h set (the butterfly's b) are negated, so that b + a and a + (-b)
// give a+b in the lower lane and a-b in the upper one.
DATA fp8sgn1<>+0(SB)/8, $0x8000000000000000
DATA fp8sgn1<>+8(SB)/8, $0x8000000000000000
DATA fp8sgn1<>+16(SB)/8, $0x8000000000000000
DATA fp8sgn1<>+24(SB)/8, $0x8000000000000000
GLOBL fp8sgn1<>(SB), RODATA|NOPTR, $32
DATA fp8sgn2<>+0(SB)/8, $0
DATA fp8sgn2<>+8(SB)/8, $0x8000000080000000
DATA fp8sgn2<>+16(SB)/8, $0
DATA fp8sgn2<>+24(SB)/8, $0x8000000080000000
GLOBL fp8sgn2<>(SB), RODATA|NOPTR, $32
DATA fp8sgn4<>+0(SB)/8, $0
DATA fp8sgn4<>+8(SB)/8, $0
DATA fp8sgn4<>+16(SB)/8, $0x8000000080000000
DATA fp8sgn4<>+24(SB)/8, $0x8000000080000000
GLOBL fp8sgn4<>(SB), RODATA|NOPTR, $32

// The byte order of VPACKUS{DW,WB}'s result, back to element order.
DATA fp8perm<>+0(SB)/4, $0
DATA fp8perm<>+4(SB)/4, $4
DATA fp8perm<>+8(SB)/4, $1
DATA fp8perm<>+12(SB)/4, $5
DATA fp8perm<>+16(SB)/4, $2
DATA fp8perm<>+20(SB)/4, $6
DATA fp8perm<>+24(SB)/4, $3
DATA fp8perm<>+28(SB)/4, $7
GLOBL fp8perm<>(SB), RODATA|NOPTR, $32

DATA fp8abs<>+0(SB)/4, $0x7fffffff
GLOBL fp8abs<>(SB), RODATA|NOPTR, $4
DATA fp8sign<>+0(SB)/4, $0x80000000
GLOBL fp8sign<>(SB), RODATA|NOPTR, $4
DATA fp8rbias<>+0(SB)/4, $0xc407ffff // 0x7FFFF - 120<<23: rebias (127-7) and round
GLOBL fp8rbias<>(SB), RODATA|NOPTR, $4
DATA fp8dmin<>+0(SB)/4, $0x3c800000 // 2^-6, E4M3's smallest normal; 121<<23
GLOBL fp8dmin<>(SB), RODATA|NOPTR, $4
DATA fp8denorm<>+0(SB)/4, $0x46800000 // 2^14: |y| + 2^14 rounds to a multiple of 2^-9
GLOBL fp8denorm<>(SB), RODATA|NOPTR, $4
DATA fp8sat<>+0(SB)/4, $0x7e
GLOBL fp8sat<>(SB), RODATA|NOPTR, $4
DATA fp8inf<>+0(SB)/4, $0x7f800000
GLOBL fp8inf<>(SB), RODATA|NOPTR, $4
DATA fp8bias<>+0(SB)/4, $0x3c000000 // 120<<23
GLOBL fp8bias<>(SB), RODATA|NOPTR, $4
DATA fp8thr<>+0(SB)/4, $0x00800000 // a code's exponent field is 0 below it (at bit 20)
GLOBL fp8thr<>(SB), RODATA|NOPTR, $4
DATA fp8one<>+0(SB)/4, $1
GLOBL fp8one<>(SB), RODATA|NOPTR, $4
DATA fp8rnd<>+0(SB)/4, $0x7fff
GLOBL fp8rnd<>(SB), RODATA|NOPTR, $4
DATA fp8qnan<>+0(SB)/4, $0x7fc00000
GLOBL fp8qnan<>(SB), RODATA|NOPTR, $4

// ---- encode: widening, the squares and their tree ----

#define WID_BF16(M, Y) \
	VPMOVZXWD M, Y \
	VPSLLD    $16, Y, Y

#define WID_F16(M, Y) \
	VCVTPH2PS M, Y

#define WID_F32(M, Y) \
	VMOVUPS M, Y

// PREP widens the block (SI, elements of ES bytes) into u (DI) and sets
// t (BX) to the tree's first level, t_i = x_i*x_i + x_{i+h}*x_{i+h} for
// h = n/2; then TREE adds the rest of the tree, t_i += t_{i+h} for
// h = n/4, ..., 8 vector by vector (each lane the portable code's sum),
// and 4, 2, 1 inside one vector, and returns t_0.
#define PREP(WID, ES) \
	MOVQ u+0(FP), DI           \
	MOVQ t+8(FP), BX           \
	MOVQ src+16(FP), SI        \
	MOVQ n+24(FP), CX          \
	MOVQ CX, DX                \
	SHRQ $1, DX                \
	LEAQ (SI)(DX*ES), R8       \
	LEAQ (DI)(DX*4), R9        \
	XORQ AX, AX                \
prep:                          \
	WID((SI)(AX*ES), Y0)       \
	WID((R8)(AX*ES), Y1)       \
	WID(8*ES(SI)(AX*ES), Y2)   \
	WID(8*ES(R8)(AX*ES), Y3)   \
	VMOVUPS Y0, (DI)(AX*4)     \
	VMOVUPS Y1, (R9)(AX*4)     \
	VMOVUPS Y2, 32(DI)(AX*4)   \
	VMOVUPS Y3, 32(R9)(AX*4)   \
	VMULPS  Y0, Y0, Y0         \
	VMULPS  Y1, Y1, Y1         \
	VMULPS  Y2, Y2, Y2         \
	VMULPS  Y3, Y3, Y3         \
	VADDPS  Y1, Y0, Y0         \
	VADDPS  Y3, Y2, Y2         \
	VMOVUPS Y0, (BX)(AX*4)     \
	VMOVUPS Y2, 32(BX)(AX*4)   \
	ADDQ    $16, AX            \
	CMPQ    AX, DX             \
	JB      prep

#define TREE \
tree:                          \
	SHRQ $1, DX                \
	CMPQ DX, $8                \
	JB   last                  \
	LEAQ (BX)(DX*4), R8        \
	XORQ AX, AX                \
tloop:                         \
	VMOVUPS (BX)(AX*4), Y0     \
	VADDPS  (R8)(AX*4), Y0, Y0 \
	VMOVUPS Y0, (BX)(AX*4)     \
	ADDQ    $8, AX             \
	CMPQ    AX, DX             \
	JB      tloop              \
	JMP     tree               \
last:                          \
	VMOVUPS      (BX), Y0      \
	VEXTRACTF128 $1, Y0, X1    \
	VADDPS       X1, X0, X0    \
	VMOVHLPS     X0, X0, X1    \
	VADDPS       X1, X0, X0    \
	VMOVSHDUP    X0, X1        \
	VADDSS       X1, X0, X0    \
	VMOVSS       X0, ret+32(FP) \
	VZEROUPPER                 \
	RET

// func fp8PrepBF16AVX2(u, t *float32, src *byte, n int) float32
TEXT ·fp8PrepBF16AVX2(SB), NOSPLIT, $0-36
	PREP(WID_BF16, 2)
	TREE

// func fp8PrepF16AVX2(u, t *float32, src *byte, n int) float32
TEXT ·fp8PrepF16AVX2(SB), NOSPLIT, $0-36
	PREP(WID_F16, 2)
	TREE

// func fp8PrepF32AVX2(u, t *float32, src *byte, n int) float32
TEXT ·fp8PrepF32AVX2(SB), NOSPLIT, $0-36
	PREP(WID_F32, 4)
	TREE

// ---- the transform ----

// INREG applies the butterflies at strides 1, 2 and 4 to the eight lanes
// of Y (Y8, Y9, Y10 the sign masks; Y11 scratch).
#define INREG(Y) \
	VPERMILPS  $0xb1, Y, Y11     \
	VXORPS     Y8, Y, Y          \
	VADDPS     Y, Y11, Y         \
	VPERMILPS  $0x4e, Y, Y11     \
	VXORPS     Y9, Y, Y          \
	VADDPS     Y, Y11, Y         \
	VPERM2F128 $0x01, Y, Y, Y11  \
	VXORPS     Y10, Y, Y         \
	VADDPS     Y, Y11, Y

// BFLY sets (A, B) to (A+B, A-B), lane by lane (Y12 scratch).
#define BFLY(A, B) \
	VSUBPS  B, A, Y12 \
	VADDPS  B, A, A   \
	VMOVAPS Y12, B

// func fwhtAVX2(u *float32, n int)
// The unnormalised transform in place (fwht): strides 1 to 32 on 64
// elements in registers, then the larger strides two at a time.
TEXT ·fwhtAVX2(SB), NOSPLIT, $0-16
	MOVQ    u+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVDQU fp8sgn1<>(SB), Y8
	VMOVDQU fp8sgn2<>(SB), Y9
	VMOVDQU fp8sgn4<>(SB), Y10
	SHLQ    $2, CX          // n in bytes from here on
	LEAQ    (SI)(CX*1), R11 // end
	CMPQ    CX, $128
	JNE     p64
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	INREG(Y0)
	INREG(Y1)
	INREG(Y2)
	INREG(Y3)
	BFLY(Y0, Y1)
	BFLY(Y2, Y3)
	BFLY(Y0, Y2)
	BFLY(Y1, Y3)
	VMOVUPS Y0, (SI)
	VMOVUPS Y1, 32(SI)
	VMOVUPS Y2, 64(SI)
	VMOVUPS Y3, 96(SI)
	VZEROUPPER
	RET

p64:
	MOVQ SI, DI

p64loop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	INREG(Y0)
	INREG(Y1)
	INREG(Y2)
	INREG(Y3)
	INREG(Y4)
	INREG(Y5)
	INREG(Y6)
	INREG(Y7)
	BFLY(Y0, Y1)
	BFLY(Y2, Y3)
	BFLY(Y4, Y5)
	BFLY(Y6, Y7)
	BFLY(Y0, Y2)
	BFLY(Y1, Y3)
	BFLY(Y4, Y6)
	BFLY(Y5, Y7)
	BFLY(Y0, Y4)
	BFLY(Y1, Y5)
	BFLY(Y2, Y6)
	BFLY(Y3, Y7)
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ    $256, DI
	CMPQ    DI, R11
	JB      p64loop
	MOVQ    $256, R8 // the stride h = 64, in bytes

rest:
	CMPQ R8, CX
	JAE  done
	LEAQ (R8)(R8*1), AX
	CMPQ AX, CX
	JAE  r2
	// strides h and 2h: the quadruples (i, i+h, i+2h, i+3h)
	LEAQ (R8)(R8*2), R9
	MOVQ SI, R12

r4block:
	MOVQ R12, DI
	LEAQ (R12)(R8*1), R13

r4:
	VMOVUPS (DI), Y0
	VMOVUPS (DI)(R8*1), Y1
	VMOVUPS (DI)(R8*2), Y2
	VMOVUPS (DI)(R9*1), Y3
	VMOVUPS 32(DI), Y4
	VMOVUPS 32(DI)(R8*1), Y5
	VMOVUPS 32(DI)(R8*2), Y6
	VMOVUPS 32(DI)(R9*1), Y7
	BFLY(Y0, Y1)
	BFLY(Y2, Y3)
	BFLY(Y4, Y5)
	BFLY(Y6, Y7)
	BFLY(Y0, Y2)
	BFLY(Y1, Y3)
	BFLY(Y4, Y6)
	BFLY(Y5, Y7)
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DI)(R8*1)
	VMOVUPS Y2, (DI)(R8*2)
	VMOVUPS Y3, (DI)(R9*1)
	VMOVUPS Y4, 32(DI)
	VMOVUPS Y5, 32(DI)(R8*1)
	VMOVUPS Y6, 32(DI)(R8*2)
	VMOVUPS Y7, 32(DI)(R9*1)
	ADDQ    $64, DI
	CMPQ    DI, R13
	JB      r4
	LEAQ    (R12)(R8*4), R12
	CMPQ    R12, R11
	JB      r4block
	SHLQ    $2, R8
	JMP     rest

r2:
	// the last stride, h = n/2
	MOVQ SI, DI
	LEAQ (SI)(R8*1), R13

r2loop:
	VMOVUPS (DI), Y0
	VMOVUPS (DI)(R8*1), Y1
	VMOVUPS 32(DI), Y2
	VMOVUPS 32(DI)(R8*1), Y3
	BFLY(Y0, Y1)
	BFLY(Y2, Y3)
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DI)(R8*1)
	VMOVUPS Y2, 32(DI)
	VMOVUPS Y3, 32(DI)(R8*1)
	ADDQ    $64, DI
	CMPQ    DI, R13
	JB      r2loop

done:
	VZEROUPPER
	RET

// ---- encode: E4M3 codes ----

// E4M3 turns the float32 lanes of Y, times inv (Y15), into the lanes'
// dtype.F32ToE4M3FN codes (Y4, Y5, Y6, Y12 scratch): with a = |y|'s bits,
// normal: (a - 120<<23 + 0x7FFFF + (a>>20 & 1)) >> 20, at most 0x7E (which
// also catches a rounding carried into 0x7F, and saturates), 0x7F for a NaN;
// below 2^-6: the bits of |y| + 2^14 less 2^14's, rounded by the addition;
// then the sign.
#define E4M3(Y) \
	VMULPS    Y15, Y, Y       \
	VPAND     Y14, Y, Y4      \
	VPXOR     Y4, Y, Y        \
	VPSRLD    $24, Y, Y       \
	VPSLLD    $11, Y4, Y5     \
	VPSRLD    $31, Y5, Y5     \
	VPADDD    Y4, Y5, Y5      \
	VPADDD    Y13, Y5, Y5     \
	VPSRLD    $20, Y5, Y5     \
	VPMINUD   Y9, Y5, Y5      \
	VPCMPGTD  Y8, Y4, Y6      \
	VPSUBD    Y6, Y5, Y5      \
	VADDPS    Y10, Y4, Y6     \
	VPSUBD    Y10, Y6, Y6     \
	VPCMPGTD  Y4, Y11, Y12    \
	VPBLENDVB Y12, Y6, Y5, Y5 \
	VPOR      Y5, Y, Y

// func e4m3AVX2(dst *byte, src *float32, n int, inv float32)
// dst[i] = dtype.F32ToE4M3FN(src[i] * inv), n a positive multiple of 32.
TEXT ·e4m3AVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y15
	VPBROADCASTD fp8abs<>(SB), Y14
	VPBROADCASTD fp8rbias<>(SB), Y13
	VPBROADCASTD fp8dmin<>(SB), Y11
	VPBROADCASTD fp8denorm<>(SB), Y10
	VPBROADCASTD fp8sat<>(SB), Y9
	VPBROADCASTD fp8inf<>(SB), Y8
	VMOVDQU      fp8perm<>(SB), Y7
	XORQ         AX, AX

e4m3loop:
	VMOVUPS   (SI)(AX*4), Y0
	VMOVUPS   32(SI)(AX*4), Y1
	VMOVUPS   64(SI)(AX*4), Y2
	VMOVUPS   96(SI)(AX*4), Y3
	E4M3(Y0)
	E4M3(Y1)
	E4M3(Y2)
	E4M3(Y3)
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y3, Y2, Y2
	VPACKUSWB Y2, Y0, Y0
	VPERMD    Y0, Y7, Y0
	VMOVDQU   Y0, (DI)(AX*1)
	ADDQ      $32, AX
	CMPQ      AX, CX
	JB        e4m3loop
	VZEROUPPER
	RET

// ---- decode ----

// E4M3VAL loads the 8 codes at M as their float32 values into Y (Y4, Y5,
// Y6 scratch; Y12 the sign bit, Y13 fp8thr, Y14 120<<23, Y15 121<<23):
// o = (c & 0x7F) << 20 holds the exponent and mantissa in float32's places;
// rebiased by 120<<23 it is a normal code's value; a subnormal code (exponent
// field 0) is rebiased by 121<<23 instead, 2^-6 (1 + m/8), less 2^-6: m 2^-9,
// exactly (no subnormal float32 operand).
#define E4M3VAL(M, Y) \
	VPMOVZXBD M, Y          \
	VPSLLD    $24, Y, Y     \
	VPSLLD    $1, Y, Y4     \
	VPSRLD    $5, Y4, Y4    \
	VPCMPGTD  Y4, Y13, Y5   \
	VPAND     Y15, Y5, Y5   \
	VPMAXUD   Y14, Y5, Y6   \
	VPADDD    Y6, Y4, Y4    \
	VSUBPS    Y5, Y4, Y4    \
	VPAND     Y12, Y, Y     \
	VPOR      Y4, Y, Y

// func e4m3ValuesAVX2(u *float32, codes *byte, n int)
// u[i] = dtype.E4M3FNToF32(codes[i]) (no NaN code), n a positive multiple
// of 32.
TEXT ·e4m3ValuesAVX2(SB), NOSPLIT, $0-24
	MOVQ         u+0(FP), DI
	MOVQ         codes+8(FP), SI
	MOVQ         n+16(FP), CX
	VPBROADCASTD fp8sign<>(SB), Y12
	VPBROADCASTD fp8thr<>(SB), Y13
	VPBROADCASTD fp8bias<>(SB), Y14
	VPBROADCASTD fp8dmin<>(SB), Y15
	XORQ         AX, AX

valloop:
	E4M3VAL((SI)(AX*1), Y0)
	E4M3VAL(8(SI)(AX*1), Y1)
	E4M3VAL(16(SI)(AX*1), Y2)
	E4M3VAL(24(SI)(AX*1), Y3)
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	VMOVUPS Y2, 64(DI)(AX*4)
	VMOVUPS Y3, 96(DI)(AX*4)
	ADDQ    $32, AX
	CMPQ    AX, CX
	JB      valloop
	VZEROUPPER
	RET

// ROUND_BF16 turns the float32 lanes of X into bfloat16 values in the low
// halves of the lanes, as dtype.F32ToBF16 (backend/reduce's macro); T is
// scratch.
#define ROUND_BF16(X, T) \
	VPSRLD    $16, X, T    \
	VPAND     Y14, T, T    \
	VPADDD    Y13, T, T    \
	VPADDD    X, T, T      \
	VCMPPS    $3, X, X, X  \
	VPBLENDVB X, Y12, T, X \
	VPSRLD    $16, X, X

// func fp8NarrowBF16AVX2(dst *byte, u *float32, n int, k float32)
// dst[i] = bfloat16(u[i] * k), n a positive multiple of 16.
TEXT ·fp8NarrowBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         u+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS k+24(FP), Y15
	VPBROADCASTD fp8one<>(SB), Y14
	VPBROADCASTD fp8rnd<>(SB), Y13
	VPBROADCASTD fp8qnan<>(SB), Y12
	XORQ         AX, AX

nbloop:
	VMULPS    (SI)(AX*4), Y15, Y0
	VMULPS    32(SI)(AX*4), Y15, Y1
	ROUND_BF16(Y0, Y4)
	ROUND_BF16(Y1, Y5)
	VPACKUSDW Y1, Y0, Y0
	VPERMQ    $0xd8, Y0, Y0
	VMOVDQU   Y0, (DI)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        nbloop
	VZEROUPPER
	RET

// func fp8NarrowF16AVX2(dst *byte, u *float32, n int, k float32)
// dst[i] = float16(u[i] * k), n a positive multiple of 16.
TEXT ·fp8NarrowF16AVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         u+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS k+24(FP), Y15
	XORQ         AX, AX

nhloop:
	VMULPS    (SI)(AX*4), Y15, Y0
	VMULPS    32(SI)(AX*4), Y15, Y1
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (DI)(AX*2)
	VMOVDQU   X1, 16(DI)(AX*2)
	ADDQ      $16, AX
	CMPQ      AX, CX
	JB        nhloop
	VZEROUPPER
	RET

// func fp8ScaleAVX2(dst *float32, u *float32, n int, k float32, add bool)
// dst[i] = u[i] * k, or with add dst[i] += u[i] * k (dst the sum's first
// operand, as the portable code's, for its NaN), n a positive multiple of 16.
TEXT ·fp8ScaleAVX2(SB), NOSPLIT, $0-29
	MOVQ         dst+0(FP), DI
	MOVQ         u+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS k+24(FP), Y15
	XORQ         AX, AX
	CMPB         add+28(FP), $0
	JNE          addloop

setloop:
	VMULPS  (SI)(AX*4), Y15, Y0
	VMULPS  32(SI)(AX*4), Y15, Y1
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JB      setloop
	VZEROUPPER
	RET

addloop:
	VMULPS  (SI)(AX*4), Y15, Y0
	VMULPS  32(SI)(AX*4), Y15, Y1
	VMOVUPS (DI)(AX*4), Y2
	VMOVUPS 32(DI)(AX*4), Y3
	VADDPS  Y0, Y2, Y2
	VADDPS  Y1, Y3, Y3
	VMOVUPS Y2, (DI)(AX*4)
	VMOVUPS Y3, 32(DI)(AX*4)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JB      addloop
	VZEROUPPER
	RET
