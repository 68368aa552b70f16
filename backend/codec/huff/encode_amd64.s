//go:build !purego

#include "textflag.h"

// Registers: SI the next symbol, DI the next output byte, DX the bit buffer
// holding BX bits (< 8 after a flush), R8 the codeTable (codes at 0,
// lengths at 1024, wide at 2048), R9 the end of the symbols, R10 the last
// start of a full group.

// ADDSYM(OFF) codes the symbol at OFF(SI): its code ORed in at bit BX of
// DX, its length added to BX straight from the table. Clobbers AX, R13.
#define ADDSYM(OFF) \
	MOVBLZX OFF(SI), AX \
	MOVL    (R8)(AX*4), R13 \
	SHLXQ   BX, R13, R13 \
	ORQ     R13, DX \
	ADDL    1024(R8)(AX*4), BX

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

// func encodeStreamBMI2(out, syms *byte, n int, ct *codeTable) int
//
// Codes of at most MaxCodeLen (11) bits go five to a flush (7 + 55 bits
// fit the buffer). Wide tables' (escapes: up to 18 bits) go five to a flush
// too when the five fit in 63 bits, which all but the rare group with
// escapes and long codes do; the others are undone (R11 and R12 keep the
// buffer and its count) and go three to a flush (7 + 54 bits).
TEXT ·encodeStreamBMI2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ syms+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ ct+24(FP), R8
	MOVQ DI, R14
	XORQ DX, DX
	XORQ BX, BX
	LEAQ (SI)(CX*1), R9
	CMPB 2048(R8), $0
	JNE  wide
	CMPQ CX, $5
	JB   tail
	LEAQ -5(R9), R10

loop5:
	ADDSYM(0)
	ADDSYM(1)
	ADDSYM(2)
	ADDSYM(3)
	ADDSYM(4)
	ADDQ $5, SI
	FLUSH
	CMPQ SI, R10
	JBE  loop5
	JMP  tail

wide:
	CMPQ CX, $5
	JB   tail
	LEAQ -5(R9), R10

wloop5:
	MOVQ DX, R11
	MOVQ BX, R12
	ADDSYM(0)
	ADDSYM(1)
	ADDSYM(2)
	ADDSYM(3)
	ADDSYM(4)
	CMPQ BX, $63
	JA   wslow
	ADDQ $5, SI
	FLUSH
	CMPQ SI, R10
	JBE  wloop5
	JMP  tail

wslow:
	MOVQ R11, DX
	MOVQ R12, BX
	ADDSYM(0)
	ADDSYM(1)
	ADDSYM(2)
	ADDQ $3, SI
	FLUSH
	CMPQ SI, R10
	JBE  wloop5

tail:
	CMPQ SI, R9
	JAE  done
	ADDSYM(0)
	INCQ SI
	FLUSH
	JMP  tail

done:
	MOVQ DX, (DI)
	ADDQ $7, BX
	SHRQ $3, BX
	ADDQ BX, DI
	SUBQ R14, DI
	MOVQ DI, ret+32(FP)
	RET

// COUNT2(RL, RH, T) counts the low byte RL and the next byte RH of a
// register (AL and AH, BL and BH) in sub-histograms T and T+1. Clobbers CX,
// DX (legacy registers: AH and BH cannot go to the REX-prefixed ones).
#define COUNT2(RL, RH, T) \
	MOVBLZX RL, CX \
	MOVBLZX RH, DX \
	INCL    (T*1024)(DI)(CX*4) \
	INCL    ((T+1)*1024)(DI)(DX*4)

// COUNT8(R, RL, RH) counts the eight bytes of R (RL and RH its two low
// bytes), byte j in sub-histogram j mod 4. Clobbers R, CX, DX.
#define COUNT8(R, RL, RH) \
	COUNT2(RL, RH, 0) \
	SHRQ $16, R \
	COUNT2(RL, RH, 2) \
	SHRQ $16, R \
	COUNT2(RL, RH, 0) \
	SHRQ $16, R \
	COUNT2(RL, RH, 2)

// func histogram4x(h *[4][256]uint32, syms *byte, n int)
//
// Adds the n symbols (n a multiple of 16) to four sub-histograms, byte j of
// every 4 in h[j]: one counter's run of increments is a chain through
// memory, so equal neighbours must not share one.
TEXT ·histogram4x(SB), NOSPLIT, $0-24
	MOVQ h+0(FP), DI
	MOVQ syms+8(FP), SI
	MOVQ n+16(FP), R8
	ADDQ SI, R8
	CMPQ SI, R8
	JAE  hdone

hloop:
	MOVQ (SI), AX
	MOVQ 8(SI), BX
	COUNT8(AX, AL, AH)
	COUNT8(BX, BL, BH)
	ADDQ $16, SI
	CMPQ SI, R8
	JB   hloop

hdone:
	RET
