package codec

import (
	"slices"

	"github.com/zipccl/zipccl/backend/codec/huff"
	"github.com/zipccl/zipccl/backend/codec/zip3"
)

// Huff2 (docs/FORMAT.md section 4a) cuts every element into byte planes and
// codes each plane of a block as its own huff record:
//
//	bf16: exponent byte (bits 14..7); sign<<7 | bits 6..0
//	fp16: bits 14..7 (5 exponent bits, top 3 mantissa bits); sign<<7 | bits 6..0
//	fp32: exponent byte (bits 30..23); sign<<7 | bits 22..16; bits 15..8; bits 7..0
//	fp8:  the whole byte
//
// Plane 0 is always Huffman-coded when that is shorter; the others only when
// the code saves huff2MinGain, since a near-uniform plane decodes several
// times slower coded than copied and saves almost nothing.

// huff2MinGain: a residue plane is coded only if it shrinks by 13/256 (5 %).
const huff2MinGain = 13

// huff2Planes is the number of byte planes of format f.
func huff2Planes(f zip3.Format) int {
	switch f {
	case zip3.FP32:
		return 4
	case zip3.BF16, zip3.FP16:
		return 2
	}
	return 1
}

// planeBufs holds the byte planes of one block.
type planeBufs struct {
	p   [4][]byte
	r16 []byte // fp32: the low halves before their bytes are split
	hi  []byte // fp32: the high halves
}

func (b *planeBufs) grow(n int) {
	for i := range b.p {
		b.p[i] = growBuf(b.p[i], n)
	}
	b.r16 = growBuf(b.r16, 2*n)
}

// huff2Encoder codes the planes of consecutive blocks; each plane keeps its
// own table between blocks (reused when still good).
type huff2Encoder struct {
	h    [4]huff.Encoder
	b    planeBufs
	jobs [h2Slots]h2Job // bf16 and fp16: the blocks being planned and written
}

// h2Job is one bf16 or fp16 block cut into its two planes, with the records
// decided for them.
type h2Job struct {
	p    [2][]byte
	n    int
	plan [2]huff.Plan
}

// h2Slots: blocks in flight in encodeHuff2TwoStage (being planned, waiting,
// being written).
const h2Slots = 3

// planBlock cuts block src (n elements) into jb's planes and decides their
// records: plane 0 always coded when shorter, plane 1 when it saves
// huff2MinGain.
func (e *huff2Encoder) planBlock(jb *h2Job, src []byte, n int) {
	for i := range jb.p {
		jb.p[i] = growBuf(jb.p[i], 1<<huff2BlockLog)
	}
	jb.n = n
	splitBF16(jb.p[1][:n], jb.p[0][:n], src)
	e.h[0].PlanExact(&jb.plan[0], jb.p[0][:n], 0)
	e.h[1].PlanExact(&jb.plan[1], jb.p[1][:n], huff2MinGain)
}

// append appends jb's records.
func (jb *h2Job) append(dst []byte) []byte {
	dst = jb.plan[0].Append(dst, jb.p[0][:jb.n])
	return jb.plan[1].Append(dst, jb.p[1][:jb.n])
}

func (e *huff2Encoder) reset() {
	for i := range e.h {
		e.h[i].Reset()
	}
}

// setLens sets the width of the stream lengths the planes' records get.
func (e *huff2Encoder) setLens(l huff.Lens) {
	for i := range e.h {
		e.h[i].Lens = l
	}
}

// appendBlock appends the records of block src (n elements).
func (e *huff2Encoder) appendBlock(dst []byte, f zip3.Format, src []byte, n int) []byte {
	if huff2Planes(f) == 1 { // fp8: the elements are the symbols
		return e.h[0].AppendExact(dst, src[:n], 0)
	}
	if f == zip3.FP32 {
		e.b.grow(1 << huff2BlockLog)
		return e.appendFP32(dst, src, n)
	}
	// bf16 and fp16: bits 14..7, then the sign and bits 6..0
	jb := &e.jobs[0]
	e.planBlock(jb, src, n)
	return jb.append(dst)
}

// appendFP32 is appendBlock for float32. The two low byte planes are
// screened in their interleaved form first; when both stay raw (the common
// case) they are de-interleaved straight into their records, which saves a
// pass over half of the block. Same bytes as cutting all four planes.
func (e *huff2Encoder) appendFP32(dst, src []byte, n int) []byte {
	r16 := e.b.r16[:2*n]
	splitFP32(e.b.p[1][:n], r16, e.b.p[0][:n], src, &e.b.hi)
	dst = e.h[0].AppendExact(dst, e.b.p[0][:n], 0)
	dst = e.h[1].AppendExact(dst, e.b.p[1][:n], huff2MinGain)
	if !e.h[2].Screen(r16[1:], 2, n, huff2MinGain) && !e.h[3].Screen(r16, 2, n, huff2MinGain) {
		at := len(dst)
		dst = slices.Grow(dst, 2+2*n)[:at+2+2*n]
		dst[at], dst[at+1+n] = huff.ModeRaw, huff.ModeRaw
		splitFP16(dst[at+2+n:], dst[at+1:at+1+n], r16)
		return dst
	}
	splitFP16(e.b.p[3][:n], e.b.p[2][:n], r16)
	dst = e.h[2].AppendExact(dst, e.b.p[2][:n], huff2MinGain)
	return e.h[3].AppendExact(dst, e.b.p[3][:n], huff2MinGain)
}

// huff2Decoder decodes plane records; one huff.Decoder per plane keeps each
// plane's lookup table across blocks.
type huff2Decoder struct {
	h [4]huff.Decoder
	b planeBufs
}

// decodeBlock decodes the records of one block of n elements at the start
// of src, whose stream lengths have width lens, into dst and returns the
// bytes used and the CRC-32C of dst. A raw record's plane is read in
// place. nt: dst may be written past the caches.
func (d *huff2Decoder) decodeBlock(dst []byte, f zip3.Format, src []byte, n int, lens huff.Lens, nt bool) (int, uint32, error) {
	for i := range d.h {
		d.h[i].Lens = lens
	}
	if huff2Planes(f) == 1 {
		m, err := d.h[0].DecodeBlock(dst[:n], src)
		if err != nil {
			return 0, 0, err
		}
		return m, crc(dst), nil
	}
	d.b.grow(1 << huff2BlockLog)
	var pl [4][]byte
	off := 0
	for i := 0; i < huff2Planes(f); i++ {
		if off < len(src) && src[off] == huff.ModeRaw && len(src)-off > n {
			pl[i] = src[off+1 : off+1+n]
			off += 1 + n
			continue
		}
		pl[i] = d.b.p[i][:n]
		m, err := d.h[i].DecodeBlock(pl[i], src[off:])
		if err != nil {
			return 0, 0, err
		}
		off += m
	}
	// the checksum is folded in as the block is written
	if f == zip3.FP32 {
		return off, mergeFP32CRC(dst, &pl, nt), nil
	}
	return off, mergeBF16CRC(dst, pl[1], pl[0], nt), nil // bf16, fp16
}

// huff2RecordsLen is the length of the records of one block of n elements
// at the start of src, as decodeBlock reads them, found from their headers.
func huff2RecordsLen(f zip3.Format, src []byte, n int, lens huff.Lens) (int, error) {
	off := 0
	for range huff2Planes(f) {
		m, err := huff.RecordLen(src[off:], n, lens)
		if err != nil {
			return 0, err
		}
		off += m
	}
	return off, nil
}
