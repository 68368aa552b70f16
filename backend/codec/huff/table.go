// Package huff is a table-driven canonical Huffman coder for byte symbols
// (float exponents), built for speed on skewed, narrow alphabets.
//
// A block record codes n symbols with its own table: code lengths (at most
// MaxCodeLen bits) for a window of symbol values plus an escape code; a
// symbol outside the window is written as the escape code followed by its 8
// raw bits, so every byte value can always be coded even when the table was
// built from a sample that never saw it. The symbols are split into four
// streams decoded together with a multi-symbol lookup table. Record layout:
// docs/FORMAT.md.
package huff

import (
	"errors"
	"fmt"
	"slices"
)

// MaxCodeLen is the longest code (the lookup table has 1<<MaxCodeLen entries).
const MaxCodeLen = 11

// MaxEscLen is the longest escape code: escape code plus raw byte fit in 18 bits.
const MaxEscLen = 10

const (
	lutSize = 1 << MaxCodeLen
	lutMask = lutSize - 1
	escSym  = 256 // index of the escape symbol in length arrays
)

// Record modes.
const (
	ModeRaw  = 0 // n raw symbol bytes
	ModeHuff = 1 // table + four Huffman streams
	ModeRLE  = 2 // one symbol repeated n times
)

var (
	// ErrCorrupt reports a malformed record.
	ErrCorrupt = errors.New("huff: corrupt record")
)

// table is a decoded code description.
type table struct {
	lo, nwin int        // window [lo, lo+nwin)
	lens     [257]uint8 // lens[i] = length of symbol lo+i (i < nwin); lens[escSym] = escape length
}

// parseTable reads a serialized table; it returns the table and its byte length.
func parseTable(src []byte, t *table) (int, error) {
	if len(src) < 2 {
		return 0, fmt.Errorf("%w: truncated table", ErrCorrupt)
	}
	t.lo = int(src[0])
	t.nwin = int(src[1]) + 1
	if t.lo+t.nwin > 256 {
		return 0, fmt.Errorf("%w: table window %d+%d past 255", ErrCorrupt, t.lo, t.nwin)
	}
	nb := (t.nwin + 2) / 2
	if len(src) < 2+nb {
		return 0, fmt.Errorf("%w: truncated table", ErrCorrupt)
	}
	nib := func(i int) uint8 { return src[2+i/2] >> (4 * (i & 1)) & 15 }
	t.lens = [257]uint8{}
	kraft := 0
	for i := 0; i < t.nwin; i++ {
		l := nib(i)
		if l > MaxCodeLen {
			return 0, fmt.Errorf("%w: code length %d", ErrCorrupt, l)
		}
		t.lens[i] = l
		if l > 0 {
			kraft += lutSize >> l
		}
	}
	el := nib(t.nwin)
	if el > MaxEscLen || (el > 0 && t.nwin == 256) {
		return 0, fmt.Errorf("%w: escape length %d", ErrCorrupt, el)
	}
	if (t.nwin+1)%2 == 1 && src[2+nb-1]>>4 != 0 {
		return 0, fmt.Errorf("%w: table padding", ErrCorrupt)
	}
	t.lens[escSym] = el
	if el > 0 {
		kraft += lutSize >> el
	}
	if kraft > lutSize || kraft == 0 {
		return 0, fmt.Errorf("%w: code lengths oversubscribed", ErrCorrupt)
	}
	return 2 + nb, nil
}

// tableLen is the serialized length of a table of nwin window symbols:
// lo, nwin-1, then a 4-bit length per symbol and one for the escape.
func tableLen(nwin int) int { return 2 + (nwin+2)/2 }

func appendTable(dst []byte, t *table) []byte {
	dst = append(dst, byte(t.lo), byte(t.nwin-1))
	nb := (t.nwin + 2) / 2
	start := len(dst)
	for i := 0; i < nb; i++ {
		dst = append(dst, 0)
	}
	for i := 0; i <= t.nwin; i++ {
		l := t.lens[i]
		if i == t.nwin {
			l = t.lens[escSym]
		}
		dst[start+i/2] |= l << (4 * (i & 1))
	}
	return dst
}

// canonical assigns canonical codes (MSB-first, shorter codes first, ties by
// symbol index with the escape last) and returns them bit-reversed for
// LSB-first streams. codes[i] is valid where lens[i] > 0.
func (t *table) canonical(codes *[257]uint16) {
	var count [MaxCodeLen + 1]int
	idx := func(i int) int { // i in [0, nwin] -> lens index
		if i == t.nwin {
			return escSym
		}
		return i
	}
	for i := 0; i <= t.nwin; i++ {
		count[t.lens[idx(i)]]++
	}
	count[0] = 0
	var next [MaxCodeLen + 2]int
	code := 0
	for l := 1; l <= MaxCodeLen; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	for i := 0; i <= t.nwin; i++ {
		j := idx(i)
		l := t.lens[j]
		if l == 0 {
			continue
		}
		c := next[l]
		next[l]++
		codes[j] = reverse(uint16(c), l)
	}
}

func reverse(c uint16, l uint8) uint16 {
	var r uint16
	for i := uint8(0); i < l; i++ {
		r = r<<1 | c>>i&1
	}
	return r
}

// buildLengths computes Huffman code lengths (<= maxLen) for counts; zero
// counts get length 0. At least one count must be non-zero.
func buildLengths(counts []uint32, lens []uint8, maxLen int, scratch *buildScratch) {
	for i := range lens {
		lens[i] = 0
	}
	w := scratch.w[:0]
	for i, c := range counts {
		if c > 0 {
			w = append(w, uint64(c)<<16|uint64(i))
		}
	}
	if len(w) == 1 {
		lens[w[0]&0xffff] = 1
		return
	}
	for {
		if huffLengths(w, lens, scratch) <= maxLen {
			scratch.w = w
			return
		}
		// flatten the distribution and retry
		for i := range w {
			c := w[i] >> 16
			c = (c + 1) / 2
			w[i] = c<<16 | w[i]&0xffff
		}
	}
}

type buildScratch struct {
	w      []uint64
	parent [514]int
	weight [514]uint64
	pm     pmScratch // exact tables only
}

// huffLengths sets lens for the leaves in w (count<<16|symbol) and returns the maximum length.
func huffLengths(w []uint64, lens []uint8, s *buildScratch) int {
	slices.Sort(w)
	n := len(w)
	for i := 0; i < n; i++ {
		s.weight[i] = w[i] >> 16
	}
	// two-queue construction: leaves 0..n-1 sorted, internal nodes n..2n-2 in creation order
	li, ii, next := 0, n, n
	pick := func() int {
		if li < n && (ii >= next || s.weight[li] <= s.weight[ii]) {
			li++
			return li - 1
		}
		ii++
		return ii - 1
	}
	for next < 2*n-1 {
		a := pick()
		b := pick()
		s.weight[next] = s.weight[a] + s.weight[b]
		s.parent[a] = next
		s.parent[b] = next
		next++
	}
	root := 2*n - 2
	var depth [514]int
	depth[root] = 0
	maxd := 0
	for i := root - 1; i >= 0; i-- {
		depth[i] = depth[s.parent[i]] + 1
		if i < n {
			lens[w[i]&0xffff] = uint8(min(depth[i], 255))
			maxd = max(maxd, depth[i])
		}
	}
	return maxd
}
