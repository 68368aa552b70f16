package huff

import (
	"encoding/binary"
	"fmt"
)

// lut entry layout: bits 0..5 the bits taken, 24..26 the symbol count,
// 32..63 up to four symbols (the first in the low byte). An entry of 0 is
// the escape or no code at all; single tells which. The bit count at the
// bottom drops the bits with one shift straight off the table load (the
// decoder's dependency chain), one rotate brings the symbols down with the
// count on top, and an entry of 0 leaves a stream where it is.
const (
	lutCountShift = 24
	lutSymShift   = 32
	lutInvalid    = MaxCodeLen + 1 // buildLUT's length of no code
)

// Decoder decodes records. The zero value is ready to use; it is not safe for
// concurrent use. It caches the lookup table of the last table seen.
type Decoder struct {
	t      table
	codes  [257]uint16
	single [lutSize]uint16     // sym | len<<9; len 0: bad; sym 0x100 bit: escape
	multi  [lutSize + 2]uint16 // sym | (lutInvalid-len)<<8; 0: escape or bad; 2 spare for 4-byte gathers
	lut    [lutSize]uint64
	key    [130]byte
	keyLen int
	escLen uint
	coded  [256]bool // symbols with a code of their own (may not be escaped)
	// Lens: the width of the records' stream lengths, set by the caller
	Lens Lens
}

// DecodeBlock decodes the record at the start of src into out (len(out)
// symbols) and returns the record length.
func (d *Decoder) DecodeBlock(out, src []byte) (int, error) {
	n := len(out)
	m, err := plainRecord(src, n)
	if err != nil {
		return 0, err
	}
	switch src[0] {
	case ModeRaw:
		copy(out, src[1:1+n])
		return m, nil
	case ModeRLE:
		s := src[1]
		for i := range out {
			out[i] = s
		}
		return m, nil
	}
	tl, err := parseTable(src[1:], &d.t)
	if err != nil {
		return 0, err
	}
	if tl != d.keyLen || string(d.key[:tl]) != string(src[1:1+tl]) {
		d.buildLUT()
		d.keyLen = copy(d.key[:], src[1:1+tl])
	}
	starts, err := streamStarts(src, 1+tl, d.Lens)
	if err != nil {
		return 0, err
	}
	pos := starts[4]
	src = src[:pos]
	if useQuad && n >= quadMin {
		if err := d.decodeQuad(out, src, &starts); err != nil {
			return 0, err
		}
		return pos, nil
	}
	for k := 0; k < 4; k += 2 {
		o0 := out[k*n>>2 : (k+1)*n>>2]
		o1 := out[(k+1)*n>>2 : (k+2)*n>>2]
		if err := d.decodePair(o0, o1, src, starts[k], starts[k+1], starts[k+2]); err != nil {
			return 0, fmt.Errorf("streams %d-%d: %w", k, k+1, err)
		}
	}
	return pos, nil
}

// plainRecord checks the mode of the record of n symbols at the start of
// src and returns the length of a raw or run record (0 for a Huffman one,
// whose length its headers give).
func plainRecord(src []byte, n int) (int, error) {
	if len(src) < 1 {
		return 0, fmt.Errorf("%w: empty record", ErrCorrupt)
	}
	switch src[0] {
	case ModeRaw:
		if len(src) < 1+n {
			return 0, fmt.Errorf("%w: truncated raw record", ErrCorrupt)
		}
		return 1 + n, nil
	case ModeRLE:
		if len(src) < 2 {
			return 0, fmt.Errorf("%w: truncated rle record", ErrCorrupt)
		}
		return 2, nil
	case ModeHuff:
		return 0, nil
	}
	return 0, fmt.Errorf("%w: unknown record mode %d", ErrCorrupt, src[0])
}

// streamStarts reads the stream header at src[hdr:] of a Huffman record,
// four lengths of width lens: the offsets in src where its four streams
// start, and where the last ends.
func streamStarts(src []byte, hdr int, lens Lens) ([5]int, error) {
	var starts [5]int
	if len(src) < hdr+lens.hdr() {
		return starts, fmt.Errorf("%w: truncated stream header", ErrCorrupt)
	}
	pos := hdr + lens.hdr()
	starts[0] = pos
	for k := 0; k < 4; k++ {
		var l int
		if lens == Lens16 {
			l = int(binary.LittleEndian.Uint16(src[hdr+2*k:]))
		} else {
			l = int(binary.LittleEndian.Uint32(src[hdr+4*k:]))
		}
		if l > len(src)-pos {
			return starts, fmt.Errorf("%w: stream %d length %d past end", ErrCorrupt, k, l)
		}
		pos += l
		starts[k+1] = pos
	}
	return starts, nil
}

// RecordLen is the length of the record of n symbols at the start of src,
// whose stream lengths have width lens, found from its headers without
// decoding it (to hand records to decoders on other threads). Decoding it
// still checks all of it.
func RecordLen(src []byte, n int, lens Lens) (int, error) {
	if m, err := plainRecord(src, n); err != nil || src[0] != ModeHuff {
		return m, err
	}
	var t table
	tl, err := parseTable(src[1:], &t)
	if err != nil {
		return 0, err
	}
	starts, err := streamStarts(src, 1+tl, lens)
	return starts[4], err
}

// quadMin: below this many symbols a record's streams are too short for the
// kernel's rounds and go the portable way.
const quadMin = 256

func (d *Decoder) buildLUT() {
	t := &d.t
	t.canonical(&d.codes)
	clear(d.single[:])
	clear(d.multi[:])
	for i := 0; i <= t.nwin; i++ {
		j := i
		sym := uint16(t.lo + i)
		if i == t.nwin {
			j = escSym
			sym = 0x100
		}
		l := t.lens[j]
		if l == 0 {
			continue
		}
		v := sym | uint16(l)<<9
		m := sym | uint16(lutInvalid-l)<<8
		if j == escSym {
			m = 0
		}
		for x := int(d.codes[j]); x < lutSize; x += 1 << l {
			d.single[x] = v
			d.multi[x] = m
		}
	}
	d.escLen = uint(t.lens[escSym])
	d.coded = [256]bool{}
	minLen := MaxCodeLen
	for i := 0; i < t.nwin; i++ {
		d.coded[t.lo+i] = t.lens[i] > 0
		if l := int(t.lens[i]); l > 0 {
			minLen = min(minLen, l)
		}
	}
	more := lutMore(minLen)
	if useLUTAsm {
		fillLUTAVX2(&d.lut, &d.multi, more)
	} else {
		fillLUT(&d.lut, &d.multi, more)
	}
}

// lutMore is how many codes after the first can fit in a lookup's
// MaxCodeLen bits when no symbol's code is shorter than minLen: up to
// three, none when every code is over half the bits. A lookup table of
// float16's exponent plane, whose codes are 4 bits or longer, holds at
// most two symbols an entry, so its fill skips two of its three gathers
// (buildLUT was 11 % of decoding the demo's float16 weights).
func lutMore(minLen int) int {
	return min(3, MaxCodeLen/minLen-1)
}

// fillLUT sets lut[v] to the decode of up to four codes from the 11 bits of
// v, greedily, as long as each lies wholly within them. The lookups past the
// first are done whatever they find (an escape or no code reads as
// lutInvalid bits, and lengths only add up, so one too long ends the run)
// and the count comes from comparisons: no branches but the first code's.
// Only more (0..3) lookups follow the first; the others read as no code,
// which changes no entry's bits, count or symbols when more is lutMore of
// the shortest code (only the bytes past its count, which no decoder
// reads).
func fillLUT(lut *[lutSize]uint64, m *[lutSize + 2]uint16, more int) {
	at := func(k int, r uint) uint16 { // lookup k after the first, or no code
		if k > more {
			return 0
		}
		return m[r&lutMask]
	}
	for v := range lut {
		m1 := m[v]
		l1 := lutInvalid - uint(m1>>8)
		if l1 > MaxCodeLen {
			lut[v] = 0
			continue
		}
		r := uint(v) >> l1
		m2 := at(1, r)
		l2 := lutInvalid - uint(m2>>8)
		r >>= l2
		m3 := at(2, r)
		l3 := lutInvalid - uint(m3>>8)
		r >>= l3
		m4 := at(3, r)
		l4 := lutInvalid - uint(m4>>8)
		L2, L3 := l1+l2, l1+l2+l3
		L4 := L3 + l4
		// okK: 1 when the first K codes fit in the index
		ok2 := (L2 - lutInvalid) >> 63
		ok3 := (L3 - lutInvalid) >> 63
		ok4 := (L4 - lutInvalid) >> 63
		total := l1 + ok2*l2 + ok3*l3 + ok4*l4
		syms := uint64(m1&0xff) | uint64(m2&0xff)<<8 | uint64(m3&0xff)<<16 | uint64(m4&0xff)<<24
		lut[v] = uint64(total) | uint64(1+ok2+ok3+ok4)<<lutCountShift | syms<<lutSymShift
	}
}

var (
	errBad      = fmt.Errorf("%w: invalid code", ErrCorrupt)
	errLen      = fmt.Errorf("%w: stream length mismatch", ErrCorrupt)
	errNoEsc    = fmt.Errorf("%w: escape past stream end", ErrCorrupt)
	errEscCoded = fmt.Errorf("%w: escaped symbol has its own code", ErrCorrupt)
	errPadBits  = fmt.Errorf("%w: non-zero stream padding bits", ErrCorrupt)
)

// streamState is a bit reader part-way through a stream.
type streamState struct {
	buf uint64
	cnt uint
	pos int // next byte to load
	p   int // next output index
}

// escape decodes the code at the bottom of buf, which the lookup table
// left to it (an entry with no symbols): it returns the escaped symbol and
// the bits it took, or an error for a code that does not exist. buf must
// hold at least escLen+8 bits of the stream (or be zero past its end).
func (d *Decoder) escape(buf uint64) (byte, uint, error) {
	s := d.single[buf&lutMask]
	if s>>9 == 0 || s&0x100 == 0 {
		return 0, 0, errBad
	}
	sym := byte(buf >> (d.escLen & 63))
	if d.coded[sym] {
		return 0, 0, errEscCoded
	}
	return sym, d.escLen + 8, nil
}

// decodePair decodes two adjacent streams [s0, s1) and [s1, s2) together
// (independent dependency chains), then finishes each on its own.
func (d *Decoder) decodePair(o0, o1, src []byte, s0, s1, s2 int) error {
	lut := &d.lut
	var b0, b1 uint64
	var c0, c1 uint
	q0, q1 := s0, s1
	p0, p1 := 0, 0
	n0, n1 := len(o0), len(o1)
	end := len(src) - 8
pair:
	for p0+16 <= n0 && p1+16 <= n1 && q0 <= end && q1 <= end {
		b0 |= binary.LittleEndian.Uint64(src[q0:]) << (c0 & 63)
		q0 += int(63-c0) >> 3
		c0 |= 56
		b1 |= binary.LittleEndian.Uint64(src[q1:]) << (c1 & 63)
		q1 += int(63-c1) >> 3
		c1 |= 56
		for j := 0; j < 4; j++ {
			e0 := lut[b0&lutMask]
			e1 := lut[b1&lutMask]
			if e0 == 0 || e1 == 0 {
				// rare: an escape (>= 23 bits are left here) or a bad code;
				// take one step of each stream
				if e0 == 0 {
					sym, nb, err := d.escape(b0)
					if err != nil {
						return err
					}
					o0[p0] = sym
					p0++
					b0 >>= nb & 63
					c0 -= nb
				} else {
					binary.LittleEndian.PutUint32(o0[p0:], uint32(e0>>lutSymShift))
					p0 += int(e0 >> lutCountShift & 7)
					nb := uint(e0) & 63
					b0 >>= nb
					c0 -= nb
				}
				if e1 == 0 {
					sym, nb, err := d.escape(b1)
					if err != nil {
						return err
					}
					o1[p1] = sym
					p1++
					b1 >>= nb & 63
					c1 -= nb
				} else {
					binary.LittleEndian.PutUint32(o1[p1:], uint32(e1>>lutSymShift))
					p1 += int(e1 >> lutCountShift & 7)
					nb := uint(e1) & 63
					b1 >>= nb
					c1 -= nb
				}
				continue pair
			}
			binary.LittleEndian.PutUint32(o0[p0:], uint32(e0>>lutSymShift))
			p0 += int(e0 >> lutCountShift & 7)
			nb0 := uint(e0) & 63
			b0 >>= nb0
			c0 -= nb0
			binary.LittleEndian.PutUint32(o1[p1:], uint32(e1>>lutSymShift))
			p1 += int(e1 >> lutCountShift & 7)
			nb1 := uint(e1) & 63
			b1 >>= nb1
			c1 -= nb1
		}
	}
	if err := d.finishStream(o0, src, s0, s1, streamState{b0, c0, q0, p0}); err != nil {
		return err
	}
	return d.finishStream(o1, src, s1, s2, streamState{b1, c1, q1, p1})
}

// finishStream continues a stream from state st until len(out) symbols are
// decoded and checks that exactly the stream's bytes were consumed.
func (d *Decoder) finishStream(out, src []byte, start, end int, st streamState) error {
	lut := &d.lut
	buf, cnt, pos, p := st.buf, st.cnt, st.pos, st.p
	n := len(out)
fast:
	for p+16 <= n && pos+8 <= len(src) {
		buf |= binary.LittleEndian.Uint64(src[pos:]) << (cnt & 63)
		pos += int(63-cnt) >> 3
		cnt |= 56
		for j := 0; j < 4; j++ {
			e := lut[buf&lutMask]
			if e == 0 {
				// escape: >= 23 bits are available here
				sym, nb, err := d.escape(buf)
				if err != nil {
					return err
				}
				out[p] = sym
				p++
				buf >>= nb & 63
				cnt -= nb
				continue fast
			}
			binary.LittleEndian.PutUint32(out[p:], uint32(e>>lutSymShift))
			p += int(e >> lutCountShift & 7)
			nb := uint(e) & 63
			buf >>= nb
			cnt -= nb
		}
	}
	// careful tail: refill byte by byte, never past end
	for p < n {
		if cnt < MaxCodeLen+8 {
			for cnt <= 56 && pos < end {
				buf |= uint64(src[pos]) << (cnt & 63)
				pos++
				cnt += 8
			}
		}
		s := d.single[buf&lutMask]
		l := uint(s >> 9)
		if l == 0 {
			return errBad
		}
		if l > cnt {
			return errLen
		}
		buf >>= l & 63
		cnt -= l
		if s&0x100 != 0 {
			if cnt < 8 {
				return errNoEsc
			}
			if d.coded[byte(buf)] {
				return errEscCoded
			}
			out[p] = byte(buf)
			buf >>= 8
			cnt -= 8
		} else {
			out[p] = byte(s)
		}
		p++
	}
	// consumed bits must end inside the last byte of the stream
	used := (pos-start)*8 - int(cnt)
	if used > (end-start)*8 || (end-start)*8-used >= 8 {
		return errLen
	}
	if r := used - (end-start-1)*8; end > start && r < 8 && src[end-1]>>r != 0 {
		return errPadBits
	}
	return nil
}
