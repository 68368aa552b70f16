//go:build !purego

package huff

import (
	"fmt"
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// quadState is the state of the four streams of a record between calls of
// decodeQuadBMI2: q is the address of each stream's next bit (byte address
// *8 + bit), p of its next output byte; stuck[k] is 1 when stream k stopped
// at an entry without symbols that the kernel could not decode (no code, or
// an escape it leaves to Go). The kernel decodes escapes with single and
// coded, and fills no buffer from past lim (the address of the source's
// last 8 bytes).
type quadState struct {
	q      [4]uintptr
	p      [4]uintptr
	stuck  [4]uint8
	single *[lutSize]uint16
	coded  *[256]bool
	lim    uintptr
	left   uintptr // the rounds left, for the kernel
}

// decode_amd64.s reads quadState's fields at fixed offsets.
var (
	_ = [1]struct{}{}[unsafe.Offsetof(quadState{}.stuck)-64]
	_ = [1]struct{}{}[unsafe.Offsetof(quadState{}.single)-72]
	_ = [1]struct{}{}[unsafe.Offsetof(quadState{}.coded)-80]
	_ = [1]struct{}{}[unsafe.Offsetof(quadState{}.lim)-88]
	_ = [1]struct{}{}[unsafe.Offsetof(quadState{}.left)-96]
)

// decodeQuadBMI2 decodes up to groups rounds of four lookups in each of the
// four streams, interleaved, and returns early after a round in which a
// stream got stuck. Every round must have 16 bytes of room at each p, and
// the reads of the call's rounds 8 bytes each within the source (the
// caller's bounds, in decodeQuad).
//
//go:noescape
func decodeQuadBMI2(st *quadState, lut *[lutSize]uint64, groups int)

// fillLUTAVX2 is fillLUT eight entries at a time (AVX2 gathers).
//
//go:noescape
func fillLUTAVX2(lut *[lutSize]uint64, m *[lutSize + 2]uint16, more int)

// useLUTAsm: buildLUT fills the table with fillLUTAVX2; tests switch it off.
var useLUTAsm = cpuid.CPU.Supports(cpuid.AVX2)

// useQuad: DecodeBlock decodes a record's four streams with the assembly
// (else two at a time in Go); tests switch it off to check one against the
// other.
var useQuad = hasBMI2 && cpuid.CPU.Supports(cpuid.LZCNT)

// decodeQuad decodes the four streams of a record (starts: their byte
// bounds in src) into out: the assembly runs while any stream has room for
// a round, Go stepping over the escapes it leaves, then each stream is
// finished and checked by finishStream.
func (d *Decoder) decodeQuad(out, src []byte, starts *[5]int) error {
	n := len(out)
	var o [5]int // output bounds of the streams
	var q, p [4]int
	for k := 0; k < 4; k++ {
		o[k] = k * n >> 2
		q[k] = starts[k] * 8
		p[k] = o[k]
	}
	o[4] = n
	for {
		// a round writes <= 16 symbols and takes <= 44 bits; its early
		// fill reads 8 bytes <= 33 bits on, so <= 5 bytes past the
		// call's first fill in the first round and <= 6 more a round
		// after (an escape checks its own fill against lim)
		g, live := len(src), -1
		var done [4]bool
		for k := 0; k < 4; k++ {
			gk := (o[k+1] - p[k]) / 16
			if r := len(src) - 8 - q[k]>>3; r >= 5 {
				gk = min(gk, (r-5)/6+1)
			} else {
				gk = 0
			}
			if done[k] = gk <= 0; !done[k] {
				g, live = min(g, gk), k
			}
		}
		if live < 0 {
			break
		}
		// the addresses live only for the call (no stack move in between).
		// A stream without room for a round mirrors a live one: the same
		// lookups, the same bytes stored at the same places, ignored after;
		// streams of one record can end far apart (a quarter of short codes
		// beside one of long ones), and the rest is left to the kernel, not
		// to finishStream.
		sb, ob := uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&out[0]))
		st := quadState{single: &d.single, coded: &d.coded, lim: sb + uintptr(len(src)-8)}
		for k := 0; k < 4; k++ {
			m := k
			if done[k] {
				m = live
			}
			st.q[k] = sb*8 + uintptr(q[m])
			st.p[k] = ob + uintptr(p[m])
		}
		decodeQuadBMI2(&st, &d.lut, g)
		for k := 0; k < 4; k++ {
			if done[k] {
				continue
			}
			q[k] = int(st.q[k] - sb*8)
			p0 := p[k]
			p[k] = int(st.p[k] - ob)
			if st.stuck[k] == 0 {
				// every round decodes a symbol in a stream that is not
				// stuck: without one the kernel is broken, and Go would
				// call it again forever
				if p[k] == p0 {
					return fmt.Errorf("stream %d: no progress in the stream kernel", k)
				}
				continue
			}
			// a stuck stream has room for one more symbol (its last
			// lookup wrote none) and its next 18 bits within src
			sym, nb, err := d.escape(peekBits(src, q[k]))
			if err != nil {
				return fmt.Errorf("stream %d: %w", k, err)
			}
			out[p[k]] = sym
			p[k]++
			q[k] += int(nb)
		}
	}
	for k := 0; k < 4; k++ {
		pos, st := q[k]>>3, streamState{p: p[k] - o[k]}
		if r := uint(q[k] & 7); r != 0 {
			if pos >= len(src) {
				return fmt.Errorf("stream %d: %w", k, errLen)
			}
			st.buf, st.cnt = uint64(src[pos])>>r, 8-r
			pos++
		}
		st.pos = pos
		if err := d.finishStream(out[o[k]:o[k+1]], src, starts[k], starts[k+1], st); err != nil {
			return fmt.Errorf("stream %d: %w", k, err)
		}
	}
	return nil
}

// peekBits returns the up to 64 bits of src from bit position q, zeros past
// its end.
func peekBits(src []byte, q int) uint64 {
	var v uint64
	for i, pos := 0, q>>3; i < 8 && pos+i < len(src); i++ {
		v |= uint64(src[pos+i]) << (8 * i)
	}
	return v >> (q & 7)
}
