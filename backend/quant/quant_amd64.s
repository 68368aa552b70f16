//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (+ F16C) quantization and dequantize+accumulate (encode.go,
// decode.go), and the magnitude maximum of 16-bit blocks. The quantize and
// accumulate routines handle n elements, n a positive multiple of 32; the
// float32 arithmetic is the portable code's, operation for operation:
// y = x * inv and y + rne (two roundings, no FMA), the code the low bits
// of the sum; acc + float32(code) * scale.

DATA qrne<>+0(SB)/4, $0x4b400000 // 1.5 * 2^23: its bits too
GLOBL qrne<>(SB), RODATA|NOPTR, $4
DATA qperm<>+0(SB)/4, $0
DATA qperm<>+4(SB)/4, $4
DATA qperm<>+8(SB)/4, $1
DATA qperm<>+12(SB)/4, $5
DATA qperm<>+16(SB)/4, $2
DATA qperm<>+20(SB)/4, $6
DATA qperm<>+24(SB)/4, $3
DATA qperm<>+28(SB)/4, $7
GLOBL qperm<>(SB), RODATA|NOPTR, $32
DATA qlow4<>+0(SB)/2, $0x000f
GLOBL qlow4<>(SB), RODATA|NOPTR, $2
DATA qhigh4<>+0(SB)/2, $0x00f0
GLOBL qhigh4<>(SB), RODATA|NOPTR, $2
DATA qnib<>+0(SB)/1, $0x0f
GLOBL qnib<>(SB), RODATA|NOPTR, $1
DATA qeight<>+0(SB)/1, $0x08
GLOBL qeight<>(SB), RODATA|NOPTR, $1

// Y15 inv, Y14 rne (as a float and as bits), Y13 the permutation that puts
// packed bytes back in element order.
#define QCONSTS \
	VBROADCASTSS inv+24(FP), Y15 \
	VPBROADCASTD qrne<>(SB), Y14 \
	VMOVDQU      qperm<>(SB), Y13

// CODE turns the float32 lanes of Y into int32 codes.
#define CODE(Y) \
	VMULPS Y15, Y, Y \
	VADDPS Y14, Y, Y \
	VPSUBD Y14, Y, Y

// CODE4 codes Y0..Y3 (elements 0-31) and packs the codes into 32 bytes in
// element order, in Y0.
#define CODE4 \
	CODE(Y0)             \
	CODE(Y1)             \
	CODE(Y2)             \
	CODE(Y3)             \
	VPACKSSDW Y1, Y0, Y0 \
	VPACKSSDW Y3, Y2, Y2 \
	VPACKSSWB Y2, Y0, Y0 \
	VPERMD    Y0, Y13, Y0

#define LOAD_BF16(off, Y) \
	VPMOVZXWD off(SI)(AX*2), Y \
	VPSLLD    $16, Y, Y

#define LOAD_F16(off, Y) \
	VCVTPH2PS off(SI)(AX*2), Y

#define LOAD_F32(off, Y) \
	VMOVUPS off(SI)(AX*4), Y

#define QUANT_SETUP \
	MOVQ codes+0(FP), DI \
	MOVQ src+8(FP), SI   \
	MOVQ n+16(FP), CX    \
	XORQ AX, AX          \
	XORQ DX, DX          \
	QCONSTS

#define STORE8 \
	VMOVDQU Y0, (DI)(AX*1)

// STORE4 packs the 32 byte codes of Y0 two per byte, element 2k in the
// high nibble, and stores the 16 bytes.
#define STORE4 \
	VPBROADCASTW qhigh4<>(SB), Y4 \
	VPBROADCASTW qlow4<>(SB), Y5  \
	VPSLLW       $4, Y0, Y1       \
	VPAND        Y4, Y1, Y1       \
	VPSRLW       $8, Y0, Y2       \
	VPAND        Y5, Y2, Y2       \
	VPOR         Y2, Y1, Y0       \
	VPACKUSWB    Y0, Y0, Y0       \
	VPERMQ       $0x08, Y0, Y0    \
	VMOVDQU      X0, (DI)(DX*1)   \
	ADDQ         $16, DX

#define NEXT \
	ADDQ $32, AX \
	CMPQ AX, CX

// DEQ_SET and DEQ_ADD set or add float32(code) * scale for the 8
// sign-extended byte codes in the low half of X into acc at off.
#define DEQ_SET(X, Y, off) \
	VPMOVSXBD X, Y      \
	VCVTDQ2PS Y, Y      \
	VMULPS    Y15, Y, Y \
	VMOVUPS   Y, off(DI)(AX*4)

#define DEQ_ADD(X, Y, off) \
	VPMOVSXBD X, Y                \
	VCVTDQ2PS Y, Y                \
	VMULPS    Y15, Y, Y           \
	VADDPS    off(DI)(AX*4), Y, Y \
	VMOVUPS   Y, off(DI)(AX*4)

// LOAD8 splits 32 int8 codes (bytes at SI+AX) into the low halves of
// X0, X2, X1, X3 (elements 0-7, 8-15, 16-23, 24-31).
#define LOAD8 \
	VMOVDQU (SI)(AX*1), X0   \
	VMOVDQU 16(SI)(AX*1), X1 \
	VPSRLDQ $8, X0, X2       \
	VPSRLDQ $8, X1, X3

// LOAD4 splits 32 int4 codes (16 bytes at SI+DX) the same way: each
// nibble sign-extended as (x ^ 8) - 8, element 2k the high one.
#define LOAD4 \
	VMOVDQU    (SI)(DX*1), X4 \
	VPSRLW     $4, X4, X5     \
	VPAND      X12, X5, X5    \
	VPAND      X12, X4, X4    \
	VPXOR      X11, X5, X5    \
	VPSUBB     X11, X5, X5    \
	VPXOR      X11, X4, X4    \
	VPSUBB     X11, X4, X4    \
	VPUNPCKLBW X4, X5, X0     \
	VPUNPCKHBW X4, X5, X1     \
	VPSRLDQ    $8, X0, X2     \
	VPSRLDQ    $8, X1, X3     \
	ADDQ       $16, DX

#define STEP_SET \
	DEQ_SET(X0, Y4, 0)  \
	DEQ_SET(X2, Y5, 32) \
	DEQ_SET(X1, Y6, 64) \
	DEQ_SET(X3, Y7, 96) \
	NEXT

#define STEP_ADD \
	DEQ_ADD(X0, Y4, 0)  \
	DEQ_ADD(X2, Y5, 32) \
	DEQ_ADD(X1, Y6, 64) \
	DEQ_ADD(X3, Y7, 96) \
	NEXT

#define ACC_SETUP \
	MOVQ         acc+0(FP), DI     \
	MOVQ         codes+8(FP), SI   \
	MOVQ         n+16(FP), CX      \
	VBROADCASTSS s+24(FP), Y15     \
	VPBROADCASTB qnib<>(SB), X12   \
	VPBROADCASTB qeight<>(SB), X11 \
	XORQ         AX, AX            \
	XORQ         DX, DX

// func q8BF16AVX2(codes *byte, src *byte, n int, inv float32)
TEXT ·q8BF16AVX2(SB), NOSPLIT, $0-28
	QUANT_SETUP

loop:
	LOAD_BF16(0, Y0)
	LOAD_BF16(16, Y1)
	LOAD_BF16(32, Y2)
	LOAD_BF16(48, Y3)
	CODE4
	STORE8
	NEXT
	JB loop
	VZEROUPPER
	RET

// func q4BF16AVX2(codes *byte, src *byte, n int, inv float32)
TEXT ·q4BF16AVX2(SB), NOSPLIT, $0-28
	QUANT_SETUP

loop:
	LOAD_BF16(0, Y0)
	LOAD_BF16(16, Y1)
	LOAD_BF16(32, Y2)
	LOAD_BF16(48, Y3)
	CODE4
	STORE4
	NEXT
	JB loop
	VZEROUPPER
	RET

// func q8F16AVX2(codes *byte, src *byte, n int, inv float32)
TEXT ·q8F16AVX2(SB), NOSPLIT, $0-28
	QUANT_SETUP

loop:
	LOAD_F16(0, Y0)
	LOAD_F16(16, Y1)
	LOAD_F16(32, Y2)
	LOAD_F16(48, Y3)
	CODE4
	STORE8
	NEXT
	JB loop
	VZEROUPPER
	RET

// func q4F16AVX2(codes *byte, src *byte, n int, inv float32)
TEXT ·q4F16AVX2(SB), NOSPLIT, $0-28
	QUANT_SETUP

loop:
	LOAD_F16(0, Y0)
	LOAD_F16(16, Y1)
	LOAD_F16(32, Y2)
	LOAD_F16(48, Y3)
	CODE4
	STORE4
	NEXT
	JB loop
	VZEROUPPER
	RET

// func q8F32AVX2(codes *byte, src *byte, n int, inv float32)
TEXT ·q8F32AVX2(SB), NOSPLIT, $0-28
	QUANT_SETUP

loop:
	LOAD_F32(0, Y0)
	LOAD_F32(32, Y1)
	LOAD_F32(64, Y2)
	LOAD_F32(96, Y3)
	CODE4
	STORE8
	NEXT
	JB loop
	VZEROUPPER
	RET

// func q4F32AVX2(codes *byte, src *byte, n int, inv float32)
TEXT ·q4F32AVX2(SB), NOSPLIT, $0-28
	QUANT_SETUP

loop:
	LOAD_F32(0, Y0)
	LOAD_F32(32, Y1)
	LOAD_F32(64, Y2)
	LOAD_F32(96, Y3)
	CODE4
	STORE4
	NEXT
	JB loop
	VZEROUPPER
	RET

// func acc8AVX2(acc *float32, codes *byte, n int, s float32, first bool)
TEXT ·acc8AVX2(SB), NOSPLIT, $0-29
	ACC_SETUP
	CMPB first+28(FP), $0
	JEQ  add

set:
	LOAD8
	STEP_SET
	JB set
	VZEROUPPER
	RET

add:
	LOAD8
	STEP_ADD
	JB add
	VZEROUPPER
	RET

// func acc4AVX2(acc *float32, codes *byte, n int, s float32, first bool)
TEXT ·acc4AVX2(SB), NOSPLIT, $0-29
	ACC_SETUP
	CMPB first+28(FP), $0
	JEQ  add

set:
	LOAD4
	STEP_SET
	JB set
	VZEROUPPER
	RET

add:
	LOAD4
	STEP_ADD
	JB add
	VZEROUPPER
	RET

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

// func absMax32AVX2(p *byte, n int) uint32
// The largest of n 32-bit words with their top bit cleared (the magnitude
// of a float32), n a positive multiple of 16.
TEXT ·absMax32AVX2(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPCMPEQD Y15, Y15, Y15
	VPSRLD   $1, Y15, Y15 // 0x7FFFFFFF in every lane
	VPXOR    Y0, Y0, Y0
	VPXOR    Y1, Y1, Y1

loop16:
	VPAND   (SI), Y15, Y2
	VPAND   32(SI), Y15, Y3
	VPMAXUD Y2, Y0, Y0
	VPMAXUD Y3, Y1, Y1
	ADDQ    $64, SI
	SUBQ    $16, CX
	JNZ     loop16
	VPMAXUD      Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0x4E, X0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0xB1, X0, X1
	VPMAXUD      X1, X0, X0
	VMOVD        X0, AX
	MOVL         AX, ret+16(FP)
	VZEROUPPER
	RET
