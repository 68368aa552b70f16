//go:build !purego

#include "textflag.h"

// ADDSYM codes the table entry in R (code | len<<24) into the bit buffer DX
// holding BX bits. Clobbers R13 and R.
#define ADDSYM(R) \
	MOVL  R, R13 \
	ANDL  $0xffffff, R13 \
	SHLXQ BX, R13, R13 \
	ORQ   R13, DX \
	SHRL  $24, R \
	ADDQ  R, BX

// FLUSH stores the whole bytes of DX and keeps the remaining BX&7 bits.
#define FLUSH \
	MOVQ  DX, (DI) \
	MOVQ  BX, AX \
	SHRQ  $3, AX \
	ADDQ  AX, DI \
	MOVQ  BX, R13 \
	ANDQ  $-8, R13 \
	SHRXQ R13, DX, DX \
	ANDQ  $7, BX

// func encodeStreamBMI2(out, syms *byte, n int, ct *[256]uint32) int
TEXT ·encodeStreamBMI2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ syms+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ ct+24(FP), R8
	MOVQ DI, R14
	XORQ DX, DX
	XORQ BX, BX
	LEAQ (SI)(CX*1), R9
	CMPQ CX, $3
	JB   tail
	LEAQ -3(R9), R10

loop3:
	MOVBLZX (SI), AX
	MOVL    (R8)(AX*4), AX
	MOVBLZX 1(SI), R11
	MOVL    (R8)(R11*4), R11
	MOVBLZX 2(SI), R12
	MOVL    (R8)(R12*4), R12
	ADDQ    $3, SI
	ADDSYM(AX)
	ADDSYM(R11)
	ADDSYM(R12)
	FLUSH
	CMPQ    SI, R10
	JBE     loop3

tail:
	CMPQ    SI, R9
	JAE     done
	MOVBLZX (SI), AX
	MOVL    (R8)(AX*4), AX
	INCQ    SI
	ADDSYM(AX)
	FLUSH
	JMP     tail

done:
	MOVQ DX, (DI)
	ADDQ $7, BX
	SHRQ $3, BX
	ADDQ BX, DI
	SUBQ R14, DI
	MOVQ DI, ret+32(FP)
	RET
