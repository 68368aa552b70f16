// Package quant is zipccl's opt-in lossy coding of float tensors for the
// wire: blockwise symmetric integers, one fp32 scale per block, as int8
// (ZeRO++'s qwZ weights) or int4 (its qgZ gradients); and TACO's fp8, E4M3
// codes of each block's Walsh-Hadamard transform (fp8.go), for tensor
// parallelism's activations. It is never used unless the user asked for it
// (package lossy holds the policy and the collectives).
//
// Each int8 or int4 block of B elements is widened to float32 and coded with Q = 127
// (int8) or 7 (int4) as
//
//	absmax = max |x|          s = absmax / Q        inv = Q / absmax
//	q      = rne(x * inv)     x' = q * s
//
// every operation a float32 one rounded to nearest even, so that a CUDA
// kernel gives the same bytes. +absmax maps to exactly +Q: no value is
// clipped (DeepSpeed's formula, 2^b / (2 absmax), maps it to Q+1 and clips
// it to Q). An all-zero block has s = 0 and decodes to zeros. A block
// holding a NaN or an infinity travels exact, so that overflow stays
// visible; so does a block whose absmax is below Q / MaxFloat32 (inv would
// overflow to +Inf). The error of a finite block is at most s/2 per element, plus the
// rounding of x' to the tensor's dtype when it is decoded into one.
//
// A coded tensor is one message of two parts (docs/FORMAT.md, "Lossy
// messages"): the main part, whose length depends on (mode, numel, block)
// only, so that a collective can size it in advance, and the exact part,
// the raw bytes of the blocks that travel exact (usually empty).
package quant

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Mode is a lossy coding.
type Mode uint8

const (
	None Mode = 0 // lossless: not coded by this package
	Int8 Mode = 1 // blockwise symmetric int8
	Int4 Mode = 2 // blockwise symmetric int4, two codes per byte
	FP8  Mode = 3 // TACO: E4M3 codes of each block's Hadamard transform
)

func (m Mode) String() string {
	switch m {
	case None:
		return "none"
	case Int8:
		return "int8"
	case Int4:
		return "int4"
	case FP8:
		return "fp8"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// valid reports whether m is a coding of this package.
func (m Mode) valid() bool { return m == Int8 || m == Int4 || m == FP8 }

// qmax is the largest code's value, the one absmax maps to.
func (m Mode) qmax() float32 {
	switch m {
	case Int4:
		return 7
	case FP8:
		return fp8Max
	}
	return 127
}

// CodesLen is the length of the codes of numel elements in blocks of
// block: one byte each for int8, one byte per two for int4 (the last
// byte's low nibble 0 when numel is odd), and for fp8 one byte per element
// of every whole block (a short last block's transform is whole).
func (m Mode) CodesLen(numel, block int) int {
	switch m {
	case Int4:
		return (numel + 1) / 2
	case FP8:
		return Blocks(numel, block) * block
	}
	return numel
}

// scaleLen is the length of one block's scales: s for int8 and int4, s
// and α for fp8.
func (m Mode) scaleLen() int {
	if m == FP8 {
		return 8
	}
	return 4
}

// HeaderLen is the length of a main part's header.
const HeaderLen = 24

// exactScale marks a block that travels exact (a NaN pattern, which no
// finite block's scale can be).
const exactScale = 0xFFFFFFFF

// Supported reports whether dt can be coded (float32, bfloat16, float16).
func Supported(dt dtype.DType) bool {
	return dt == dtype.Float32 || dt == dtype.BFloat16 || dt == dtype.Float16
}

// Blocks is the number of blocks of numel elements.
func Blocks(numel, block int) int { return (numel + block - 1) / block }

// MainLen is the length of the main part for numel elements coded with
// mode in blocks of block: the header, the blocks' scales, the codes.
func MainLen(mode Mode, numel, block int) int {
	return HeaderLen + mode.scaleLen()*Blocks(numel, block) + mode.CodesLen(numel, block)
}

// ErrCorrupt reports a message that does not decode.
var ErrCorrupt = errors.New("quant: corrupt message")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// MaxBlock is mode's largest block: 65536 for int8 and int4, 1024 for fp8
// (its transform runs in one GPU thread block).
func MaxBlock(mode Mode) int {
	if mode == FP8 {
		return 1 << 10
	}
	return 1 << 16
}

// CheckBlock validates a block size for mode: a power of two from 32 to
// MaxBlock(mode).
func CheckBlock(mode Mode, block int) error {
	if block < 32 || block > MaxBlock(mode) || block&(block-1) != 0 {
		return fmt.Errorf("quant: %v block size %d: want a power of two from 32 to %d", mode, block, MaxBlock(mode))
	}
	return nil
}

func putHeader(h []byte, mode Mode, dt dtype.DType, numel, block, nexact int) {
	h[0], h[1], h[2], h[3] = 'Z', 'Q', 1, byte(mode)
	h[4] = byte(dt)
	h[5] = byte(log2(block))
	h[6], h[7] = 0, 0
	binary.LittleEndian.PutUint64(h[8:], uint64(numel))
	binary.LittleEndian.PutUint32(h[16:], uint32(nexact))
	binary.LittleEndian.PutUint32(h[20:], 0)
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// Header is what a main part says of itself.
type Header struct {
	Mode  Mode
	DType dtype.DType // the coded elements' type (the exact part's)
	Numel int
	Block int
	Exact int // blocks that travel exact
}

// ExactLen is the length of the exact part that goes with the main part h
// describes: the raw bytes of its exact blocks (the last one may be short).
func (h Header) ExactLen(main []byte) int {
	if h.Exact == 0 {
		return 0
	}
	nb := Blocks(h.Numel, h.Block)
	sl := h.Mode.scaleLen()
	n := 0
	for b := range nb {
		if binary.LittleEndian.Uint32(main[HeaderLen+sl*b:]) == exactScale {
			n += (min(h.Numel, (b+1)*h.Block) - b*h.Block) * h.DType.Size()
		}
	}
	return n
}

// PeekHeader parses and checks a main part's header and length.
func PeekHeader(main []byte) (Header, error) {
	if len(main) < HeaderLen {
		return Header{}, corrupt("%d bytes, shorter than a header", len(main))
	}
	if main[0] != 'Z' || main[1] != 'Q' || main[2] != 1 {
		return Header{}, corrupt("bad magic or version % x", main[:3])
	}
	h := Header{Mode: Mode(main[3]), DType: dtype.DType(main[4]), Block: 1 << main[5]}
	if !h.Mode.valid() || !Supported(h.DType) || main[5] > 16 || main[6]|main[7] != 0 ||
		binary.LittleEndian.Uint32(main[20:]) != 0 || CheckBlock(h.Mode, h.Block) != nil {
		return Header{}, corrupt("bad header % x", main[:8])
	}
	numel := binary.LittleEndian.Uint64(main[8:])
	if numel > 2*uint64(len(main)) {
		return Header{}, corrupt("%d elements in a %d-byte main part", numel, len(main))
	}
	h.Numel = int(numel)
	h.Exact = int(binary.LittleEndian.Uint32(main[16:]))
	if want := MainLen(h.Mode, h.Numel, h.Block); len(main) != want {
		return Header{}, corrupt("main part of %d bytes, want %d", len(main), want)
	}
	if h.Exact > Blocks(h.Numel, h.Block) {
		return Header{}, corrupt("%d exact blocks of %d", h.Exact, Blocks(h.Numel, h.Block))
	}
	return h, nil
}
