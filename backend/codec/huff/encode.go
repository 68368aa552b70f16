package huff

import (
	"encoding/binary"
)

// Encoder builds per-block tables and codes blocks. The zero value is ready
// to use; it is not safe for concurrent use.
type Encoder struct {
	hist  [256]uint32
	cnt   [257]uint32
	cur   table
	codes [257]uint16
	ct    codeTable
	tbuf  []byte // serialized current table
	have  bool
	bs    buildScratch
	nlens [257]uint8
	ecnt  [257]uint32 // exactTable's escape window: counts and lengths
	elens [257]uint8
	// Lens: the width of the Huffman records' stream lengths, set by the
	// caller (the zero value, Lens32, for huff and huff2 frames)
	Lens  Lens
	exact bool // the current table is an exact one (AppendExact): every symbol coded
}

// sampleStride: every sampleStride-th symbol feeds the table histogram.
const sampleStride = 4

// Lens is the width of the four stream lengths after a Huffman record's
// table: 4 bytes each in huff and huff2 frames, 2 in packed huff2 frames
// (docs/FORMAT.md 4b), whose records hold at most 2^16 symbols, so a
// stream at most 2^14 symbols of 18 bits (an escape and its 8 bits):
// 36864 bytes.
type Lens uint8

const (
	Lens32 Lens = iota // uint32 lengths; the zero value
	Lens16             // uint16 lengths
)

// hdr is the length of the stream header: four lengths.
func (l Lens) hdr() int {
	if l == Lens16 {
		return 8
	}
	return 16
}

// fits reports whether a stream of w bytes can be stated (uint32: any of
// a record's, which holds at most 2^24 symbols).
func (l Lens) fits(w int) bool { return l != Lens16 || w <= 0xFFFF }

// AppendBlock appends a record coding syms (1 <= len(syms) <= 1<<24) to dst.
// The record never exceeds 1+len(syms) bytes (it falls back to ModeRaw).
func (e *Encoder) AppendBlock(dst, syms []byte) []byte {
	n := len(syms)
	// sample histogram
	e.hist = [256]uint32{}
	step := sampleStride
	if n < 1024 {
		step = 1
	}
	total := 0
	for i := 0; i < n; i += step {
		e.hist[syms[i]]++
		total++
	}
	lo, hi, distinct := 255, 0, 0
	for s, c := range e.hist {
		if c != 0 {
			lo = min(lo, s)
			hi = max(hi, s)
			distinct++
		}
	}
	if distinct == 1 && allEqual(syms) {
		return append(dst, ModeRLE, syms[0])
	}
	e.chooseTable(lo, hi)
	// estimate from the sample; skip coding when it cannot win
	var bits uint64
	for s, c := range e.hist {
		bits += uint64(c) * uint64(e.ct.bits[s])
	}
	if bits*uint64(n)/uint64(total) >= uint64(8*n) {
		return appendRaw(dst, syms)
	}
	return appendStreams(dst, syms, e.tbuf, &e.ct, e.Lens)
}

// appendStreams appends a Huffman record of syms under the table tbuf
// (serialized) and ct: the mode, the table, the four streams' lengths (of
// width lens) and the streams. A record that would grow past len(syms)
// bytes (a sampled table that fits the block badly), or a stream longer
// than lens can state (more symbols than a packed frame's block), is
// written raw instead.
func appendStreams(dst, syms, tbuf []byte, ct *codeTable, lens Lens) []byte {
	n := len(syms)
	start := len(dst)
	// worst case: every symbol escaped (MaxCodeLen+8 bits)
	need := 1 + len(tbuf) + lens.hdr() + (n*(MaxCodeLen+8)+7)/8 + 4*8
	dst = growCap(dst, need)
	dst = append(dst, ModeHuff)
	dst = append(dst, tbuf...)
	hdr := len(dst)
	dst = dst[:hdr+lens.hdr()]
	for k := 0; k < 4; k++ {
		s0, s1 := k*n>>2, (k+1)*n>>2
		w := encodeStreamFn(dst[len(dst):cap(dst)], syms[s0:s1], ct)
		if !lens.fits(w) {
			return appendRaw(dst[:start], syms)
		}
		if lens == Lens16 {
			binary.LittleEndian.PutUint16(dst[hdr+2*k:], uint16(w))
		} else {
			binary.LittleEndian.PutUint32(dst[hdr+4*k:], uint32(w))
		}
		dst = dst[:len(dst)+w]
		if len(dst)-start > n {
			return appendRaw(dst[:start], syms)
		}
	}
	return dst
}

func growCap(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n+len(b)/4)
		copy(nb, b)
		return nb
	}
	return b
}

func appendRaw(dst, syms []byte) []byte {
	dst = append(dst, ModeRaw)
	return append(dst, syms...)
}

func allEqual(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	x := b[0]
	for _, v := range b {
		if v != x {
			return false
		}
	}
	return true
}

// chooseTable builds a table from e.hist (window [lo-2, hi+2], unseen window
// symbols and the escape get a floor count) unless the previous table codes
// the sample within 0.4% of the new one, in which case it is kept (so the
// decoder can keep its lookup table too).
func (e *Encoder) chooseTable(lo, hi int) {
	lo = max(lo-2, 0)
	hi = min(hi+2, 255)
	nwin := hi - lo + 1
	cnt := e.cnt[:nwin+1]
	for i := 0; i < nwin; i++ {
		cnt[i] = e.hist[lo+i] + 1
	}
	cnt[nwin] = 1 // escape
	if nwin == 256 {
		cnt[nwin] = 0
	}
	lens := e.nlens[:nwin+1]
	buildLengths(cnt, lens, MaxCodeLen, &e.bs)
	if nwin < 256 && lens[nwin] > MaxEscLen {
		// swap lengths with the rarest symbol whose code is short enough
		best := -1
		for i := 0; i < nwin; i++ {
			if lens[i] <= MaxEscLen && (best < 0 || lens[i] > lens[best] || lens[i] == lens[best] && cnt[i] < cnt[best]) {
				best = i
			}
		}
		lens[nwin], lens[best] = lens[best], lens[nwin]
	}
	if e.have && !e.exact {
		var costNew, costOld uint64
		for i := 0; i < nwin; i++ {
			c := uint64(e.hist[lo+i])
			costNew += c * uint64(lens[i])
			costOld += c * uint64(e.ct.bits[lo+i])
		}
		if costOld <= costNew+costNew/256 {
			return
		}
	}
	t := &e.cur
	t.lo, t.nwin = lo, nwin
	t.lens = [257]uint8{}
	copy(t.lens[:nwin], lens[:nwin])
	t.lens[escSym] = lens[nwin]
	if nwin == 256 {
		t.lens[escSym] = 0
	}
	t.canonical(&e.codes)
	el := uint32(t.lens[escSym])
	ec := uint32(e.codes[escSym])
	for s := 0; s < 256; s++ {
		i := s - lo
		if i >= 0 && i < nwin && t.lens[i] > 0 {
			e.ct.code[s], e.ct.bits[s] = uint32(e.codes[i]), uint32(t.lens[i])
		} else {
			e.ct.code[s], e.ct.bits[s] = ec|uint32(s)<<el, el+8
		}
	}
	e.ct.wide = el+8 > MaxCodeLen
	e.tbuf = appendTable(e.tbuf[:0], t)
	e.have, e.exact = true, false
}

// Reset forgets the previous table.
func (e *Encoder) Reset() { e.have = false }

// encodeStreamFn is the stream coder in use (assembly where available).
var encodeStreamFn = encodeStream

// HasAsm reports whether the assembly stream coder is in use.
func HasAsm() bool { return isAsm }

var isAsm = false

// codeTable is what the stream coder reads: for every byte value the code
// as written (bit-reversed; an escaped symbol's is the escape code followed
// by its 8 bits) and its length. Lengths live apart from the codes so that
// the assembly adds one straight from memory. wide: some code is longer
// than MaxCodeLen bits (an escape), so fewer codes fit between flushes.
type codeTable struct {
	code [256]uint32
	bits [256]uint32
	wide bool
}

// encodeStream writes the LSB-first bit stream of syms into out (which must
// have room for len(syms)*19/8+8 bytes) and returns the bytes used.
func encodeStream(out, syms []byte, ct *codeTable) int {
	var buf uint64
	var nb uint
	pos := 0
	s := syms
	// codes are at most maxEscTotal (18) bits, so three fit after a flush
	for len(s) >= 3 && pos+8 <= len(out) {
		v0, v1, v2 := s[0], s[1], s[2]
		s = s[3:]
		buf |= uint64(ct.code[v0]) << (nb & 63)
		nb += uint(ct.bits[v0])
		buf |= uint64(ct.code[v1]) << (nb & 63)
		nb += uint(ct.bits[v1])
		buf |= uint64(ct.code[v2]) << (nb & 63)
		nb += uint(ct.bits[v2])
		binary.LittleEndian.PutUint64(out[pos:], buf)
		pos += int(nb >> 3)
		buf >>= (nb &^ 7) & 63
		nb &= 7
	}
	for _, v := range s {
		buf |= uint64(ct.code[v]) << (nb & 63)
		nb += uint(ct.bits[v])
		binary.LittleEndian.PutUint64(out[pos:], buf)
		pos += int(nb >> 3)
		buf >>= (nb &^ 7) & 63
		nb &= 7
	}
	if nb > 0 {
		out[pos] = byte(buf)
		pos++
	}
	return pos
}

// Bits returns the Huffman-coded size in bits of a histogram (a cheap
// estimate for the adaptive chooser); it ignores table overhead.
func Bits(hist *[256]uint32) uint64 {
	var e Encoder
	var lens [256]uint8
	n := 0
	for _, c := range hist {
		if c != 0 {
			n++
		}
	}
	if n <= 1 {
		return 0
	}
	buildLengths(hist[:], lens[:], MaxCodeLen, &e.bs)
	var b uint64
	for s, c := range hist {
		b += uint64(c) * uint64(lens[s])
	}
	return b
}
