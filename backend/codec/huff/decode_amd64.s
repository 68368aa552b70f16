//go:build !purego

#include "textflag.h"

// Registers: R8..R11 the bit buffers of streams 0..3, R12..R15 their output
// pointers, DI the lookup table, SI the quadState (whose left counts the
// rounds, and whose q holds each buffer's fill address in bytes while the
// kernel runs), DX and CX the buffer EARLY loads and its bit offset, AX and
// BX scratch. Every uop counts: the kernel is bound by their throughput as
// much as by the chain of lookups.
//
// A buffer is filled from its stream's bit address q: the 8 bytes at q>>3
// with bit 63 set as a sentinel, shifted down by q&7, so it holds >= 56
// bits. Where the sentinel ends up tells how many bits were taken: the next
// q is (q &^ 7) + lzcnt(buffer). Not BSR: on Intel it also waits for its
// destination's old value, which chained each stream's refill to the
// previous stream's (BenchmarkDecodeFP16Plane: 1.14x to 1.24x slower).
// A round is four lookups a stream; the refill is loaded after the third
// (EARLY) and the fourth drops its bits from it (LAST), so the load is off
// the chain of lookups (rounds of five refilled after the fifth: the
// demo's float16 tensors 1.03x to 1.05x slower, results/quad-early-fill).

// FILL(Q, B) loads buffer B for the bit address in Q. Clobbers AX, Q.
#define FILL(Q, B) \
	MOVQ  Q, AX \
	SHRQ  $3, AX \
	MOVQ  (AX), B \
	BTSQ  $63, B \
	ANDL  $7, Q \
	SHRXQ Q, B, B

// NEXTQ(OFF, B) stores in quadState.q[OFF/8], for Go, the bit address
// after the bits taken from B, whose fill started at the byte address held
// there.
#define NEXTQ(OFF, B) \
	LZCNTQ B, AX \
	MOVQ OFF(SI), BX \
	LEAQ (AX)(BX*8), BX \
	MOVQ BX, OFF(SI)

// LOOKUP(B, P) decodes the entry under the low 11 bits of B (a move the
// renamer drops and an AND: one uop, where BZHI's index register made the
// kernel 1.03x slower): drops its bits from B (the dependency chain: index,
// load, shift), stores its symbols (4 bytes, only count of them meant) at P
// and advances P by the count. An entry of 0 (an escape, or no code)
// changes nothing, so the stream's later lookups in the round find it
// again and LAST deals with it: no test here. The symbols and the count are
// loaded again from the entry rather than shifted out of it: loads have
// ports to spare.
#define LOOKUP(B, P) \
	MOVL    B, AX \
	ANDL    $0x7ff, AX \
	MOVQ    (DI)(AX*8), BX \
	SHRXQ   BX, B, B \
	MOVL    4(DI)(AX*8), BX \
	MOVL    BX, (P) \
	MOVBQZX 3(DI)(AX*8), BX \
	ADDQ    BX, P

// EARLY(OFF, B) loads into DX the buffer for the rest of the round and the
// next, from the byte of the bit address after the bits taken from B (its
// byte address stored in quadState.q[OFF/8]), and into CX that address's
// bit offset, while B's last lookup of the round runs: the refill's load
// and sentinel are off the dependency chain, which LAST joins with one
// add. The new buffer holds >= 56 bits from that offset; the last lookup
// takes <= 11, which leaves the next round's four their 44. Clobbers AX,
// BX.
#define EARLY(OFF, B) \
	LZCNTQ  B, CX \
	MOVQ    OFF(SI), BX \
	MOVQ    CX, AX \
	SHRQ    $3, AX \
	ADDQ    AX, BX \
	MOVQ    BX, OFF(SI) \
	MOVQ    (BX), DX \
	BTSQ    $63, DX \
	ANDL    $7, CX

// LAST(B, P, K, ESC) is the round's last lookup: LOOKUP with its bits and
// EARLY's offset dropped from the buffer that EARLY loaded into DX, which
// becomes B. An entry of 0 goes to ESC (a stream that met an escape earlier
// in the round has stayed on it).
#define LAST(B, P, K, ESC) \
	MOVL    B, AX \
	ANDL    $0x7ff, AX \
	MOVQ    (DI)(AX*8), BX \
	ADDQ    CX, BX \
	SHRXQ   BX, DX, B \
	MOVL    4(DI)(AX*8), BX \
	MOVL    BX, (P) \
	MOVBQZX 3(DI)(AX*8), BX \
	TESTL   BX, BX \
	JZ      ESC \
	ADDQ    BX, P

// ESCAPE(B, P, OFF, K, BACK, STUCK), out of line, decodes the escape under
// the low bits of B (the stream whose fill started at the byte address in
// quadState.q[OFF/8]): the raw byte after the escape code is read from
// memory at its bit address a, so B's bits left do not matter, and B is
// filled again from a+8, so the next round has its bits. It goes
// back with B and P as they were and stuck[K] set (Go reports the stream or
// steps over the escape) for no code at all, an escaped symbol that has a
// code of its own, or a fill that, with 7 bytes for each fill left in the
// call (quadState.left rounds, this one included), would read past
// quadState.lim.
#define ESCAPE(B, P, OFF, K, BACK, STUCK) \
	MOVL    B, AX \
	ANDL    $0x7ff, AX \
	MOVQ    72(SI), BX \
	MOVWLZX (BX)(AX*2), AX \
	BTL     $8, AX \
	JCC     STUCK \
	SHRL    $9, AX \
	LZCNTQ  B, BX \
	ADDQ    BX, AX \
	MOVQ    OFF(SI), BX \
	LEAQ    (AX)(BX*8), AX \
	LEAQ    8(AX), BX \
	SHRQ    $3, BX \
	MOVQ    96(SI), DX \
	LEAQ    -7(BX)(DX*8), BX \
	SUBQ    DX, BX \
	CMPQ    BX, 88(SI) \
	JHI     STUCK \
	MOVQ    AX, BX \
	SHRQ    $3, BX \
	MOVWLZX (BX), BX \
	MOVL    AX, CX \
	ANDL    $7, CX \
	SHRXL   CX, BX, BX \
	MOVBQZX BX, BX \
	MOVQ    80(SI), CX \
	CMPB    (CX)(BX*1), $0 \
	JNE     STUCK \
	MOVB    BX, (P) \
	INCQ    P \
	ADDQ    $8, AX \
	MOVQ    AX, BX \
	FILL(BX, B) \
	MOVQ    AX, OFF(SI) \
	JMP     BACK \
STUCK: \
	MOVB    $1, (64+K)(SI) \
	JMP     BACK

// func decodeQuadBMI2(st *quadState, lut *[lutSize]uint64, groups int)
TEXT ·decodeQuadBMI2(SB), NOSPLIT, $0-24
	MOVQ st+0(FP), SI
	MOVQ lut+8(FP), DI
	MOVQ groups+16(FP), AX
	MOVQ AX, 96(SI)
	MOVQ 32(SI), R12
	MOVQ 40(SI), R13
	MOVQ 48(SI), R14
	MOVQ 56(SI), R15
	MOVQ 0(SI), BX
	FILL(BX, R8)
	MOVQ AX, 0(SI)
	MOVQ 8(SI), BX
	FILL(BX, R9)
	MOVQ AX, 8(SI)
	MOVQ 16(SI), BX
	FILL(BX, R10)
	MOVQ AX, 16(SI)
	MOVQ 24(SI), BX
	FILL(BX, R11)
	MOVQ AX, 24(SI)

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
	EARLY(0, R8)
	LAST(R8, R12, 0, esc0)
back0:
	LOOKUP(R9, R13)
	EARLY(8, R9)
	LAST(R9, R13, 1, esc1)
back1:
	LOOKUP(R10, R14)
	EARLY(16, R10)
	LAST(R10, R14, 2, esc2)
back2:
	LOOKUP(R11, R15)
	EARLY(24, R11)
	LAST(R11, R15, 3, esc3)
back3:
	DECQ 96(SI)
	JZ   last
	CMPL 64(SI), $0
	JEQ  round

last:
	NEXTQ(0, R8)
	NEXTQ(8, R9)
	NEXTQ(16, R10)
	NEXTQ(24, R11)
	MOVQ R12, 32(SI)
	MOVQ R13, 40(SI)
	MOVQ R14, 48(SI)
	MOVQ R15, 56(SI)
	RET

// the escapes, out of line
esc0:
	ESCAPE(R8, R12, 0, 0, back0, stuck0)
esc1:
	ESCAPE(R9, R13, 8, 1, back1, stuck1)
esc2:
	ESCAPE(R10, R14, 16, 2, back2, stuck2)
esc3:
	ESCAPE(R11, R15, 24, 3, back3, stuck3)
