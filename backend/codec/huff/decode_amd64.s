//go:build !purego

#include "textflag.h"

// Registers: R8..R11 the bit buffers of streams 0..3, R12..R15 their output
// pointers, DI the lookup table, SI the quadState, CX = 11 (BZHI's index),
// DX the rounds left, AX and BX scratch.
//
// A buffer is filled from its stream's bit address q: the 8 bytes at q>>3
// with bit 63 set as a sentinel, shifted down by q&7, so it holds >= 56
// bits; a round's five lookups take <= 55. Where the sentinel ends up tells
// how many bits were taken: the next q is (q &^ 7) + lzcnt(buffer). Not BSR:
// on Intel it also waits for its destination's old value, which chained
// each stream's refill to the previous stream's (BenchmarkDecodeFP16Plane:
// 1.14x to 1.24x slower).

// FILL(Q, B) loads buffer B for the bit address in Q. Clobbers AX, Q.
#define FILL(Q, B) \
	MOVQ  Q, AX \
	SHRQ  $3, AX \
	MOVQ  (AX), B \
	BTSQ  $63, B \
	ANDL  $7, Q \
	SHRXQ Q, B, B

// NEXTQ(OFF, B) sets BX to the bit address after the bits taken from B,
// whose fill started at quadState.q[OFF/8], and stores it there (for Go;
// the next fill takes it from BX).
#define NEXTQ(OFF, B) \
	LZCNTQ B, AX \
	MOVQ OFF(SI), BX \
	ANDQ $-8, BX \
	ADDQ AX, BX \
	MOVQ BX, OFF(SI)

// LOOKUP(B, P) decodes the entry under the low 11 bits of B: drops its bits
// from B (the dependency chain: index, load, shift), stores its symbols (4
// bytes, only count of them meant) at P and advances P by the count. An
// entry of 0 changes nothing. The symbols and the count are loaded again
// from the entry rather than shifted out of it: loads have ports to spare,
// the shift ports are the kernel's bottleneck.
#define LOOKUP(B, P) \
	BZHIQ   CX, B, AX \
	MOVQ    (DI)(AX*8), BX \
	SHRXQ   BX, B, B \
	MOVL    4(DI)(AX*8), BX \
	MOVL    BX, (P) \
	MOVBQZX 3(DI)(AX*8), BX \
	ADDQ    BX, P

// LAST(B, P, K) is LOOKUP that records in stuck[K] whether the stream
// stopped (an entry of 0 repeats until Go steps over it).
#define LAST(B, P, K) \
	BZHIQ   CX, B, AX \
	MOVQ    (DI)(AX*8), BX \
	SHRXQ   BX, B, B \
	MOVL    4(DI)(AX*8), BX \
	MOVL    BX, (P) \
	MOVBQZX 3(DI)(AX*8), BX \
	TESTL   BX, BX \
	SETEQ   (64+K)(SI) \
	ADDQ    BX, P

// func decodeQuadBMI2(st *quadState, lut *[lutSize]uint64, groups int)
TEXT ·decodeQuadBMI2(SB), NOSPLIT, $0-24
	MOVQ st+0(FP), SI
	MOVQ lut+8(FP), DI
	MOVQ groups+16(FP), DX
	MOVQ $11, CX
	MOVQ 32(SI), R12
	MOVQ 40(SI), R13
	MOVQ 48(SI), R14
	MOVQ 56(SI), R15
	MOVQ 0(SI), BX
	FILL(BX, R8)
	MOVQ 8(SI), BX
	FILL(BX, R9)
	MOVQ 16(SI), BX
	FILL(BX, R10)
	MOVQ 24(SI), BX
	FILL(BX, R11)

round:
	LOOKUP(R8, R12)
	LOOKUP(R9, R13)
	LOOKUP(R10, R14)
	LOOKUP(R11, R15)
	LOOKUP(R8, R12)
	LOOKUP(R9, R13)
	LOOKUP(R10, R14)
	LOOKUP(R11, R15)
	LOOKUP(R8, R12)
	LOOKUP(R9, R13)
	LOOKUP(R10, R14)
	LOOKUP(R11, R15)
	LOOKUP(R8, R12)
	LOOKUP(R9, R13)
	LOOKUP(R10, R14)
	LOOKUP(R11, R15)
	LAST(R8, R12, 0)
	LAST(R9, R13, 1)
	LAST(R10, R14, 2)
	LAST(R11, R15, 3)
	DECQ DX
	JZ   last
	CMPL 64(SI), $0
	JNE  last
	NEXTQ(0, R8)
	FILL(BX, R8)
	NEXTQ(8, R9)
	FILL(BX, R9)
	NEXTQ(16, R10)
	FILL(BX, R10)
	NEXTQ(24, R11)
	FILL(BX, R11)
	JMP  round

last:
	NEXTQ(0, R8)
	NEXTQ(8, R9)
	NEXTQ(16, R10)
	NEXTQ(24, R11)

done:
	MOVQ R12, 32(SI)
	MOVQ R13, 40(SI)
	MOVQ R14, 48(SI)
	MOVQ R15, 56(SI)
	RET
