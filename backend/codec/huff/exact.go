package huff

import "math"

// Exact-table mode (the huff2 frame kind, docs/FORMAT.md section 4a): the
// table comes from the whole block's histogram, so every symbol present has
// a code; the window is the symbols' range, without an escape unless wide
// tails of rare symbols are cheaper escaped (escapeWindow); lengths are
// optimal under MaxCodeLen (package-merge). The records have the
// same layout as AppendBlock's and decode with the same Decoder. Costs a
// full histogram per block, buys about 0.01 bit per exponent over the
// sampled table and 0.07 on float16's wider symbol alphabet.

// residueSample: every residueSample-th symbol feeds the cheap pre-check of
// a plane that must save MinGain to be coded (near-uniform planes are
// rejected without a full histogram).
const residueSample = 16

// reuseDiv: an exact table is kept for the next block (so the decoder keeps
// its lookup table) when it codes that block within 1/reuseDiv of the
// block's own table's bits. 1/512 would save up to 0.015 % of the demo's
// tensors and decode them 4 to 6 % slower (more lookup tables to build).
const reuseDiv = 256

// AppendExact appends a record coding syms (1 <= len(syms) <= 1<<24) with
// an exact table. It writes a Huffman record only when that is at most
// len(syms) - len(syms)*minGain/256 bytes, else a raw record (a run record
// when all symbols are equal). Records never exceed 1+len(syms) bytes.
func (e *Encoder) AppendExact(dst, syms []byte, minGain int) []byte {
	return appendRecord(dst, syms, e.decideExact(syms, minGain), e.tbuf, &e.ct, e.Lens)
}

// Plan is AppendExact's record, decided but not yet written: its mode and,
// for a Huffman record, a copy of its table. Writing it (Append) reads no
// Encoder, so the records of one block can be written on one goroutine
// while the Encoder decides the next block's on another.
type Plan struct {
	mode byte
	lens Lens
	tbuf []byte
	ct   codeTable
}

// PlanExact decides the record AppendExact writes for syms, into pl.
func (e *Encoder) PlanExact(pl *Plan, syms []byte, minGain int) {
	pl.lens = e.Lens
	if pl.mode = e.decideExact(syms, minGain); pl.mode == ModeHuff {
		pl.tbuf = append(pl.tbuf[:0], e.tbuf...)
		pl.ct = e.ct
	}
}

// Append appends the record planned for syms.
func (pl *Plan) Append(dst, syms []byte) []byte {
	return appendRecord(dst, syms, pl.mode, pl.tbuf, &pl.ct, pl.lens)
}

// decideExact returns the mode of AppendExact's record for syms; for
// ModeHuff the table is in e.tbuf and e.ct.
func (e *Encoder) decideExact(syms []byte, minGain int) byte {
	n := len(syms)
	limit := n - n*minGain/256
	if !e.Screen(syms, 1, n, minGain) {
		return ModeRaw
	}
	histogramFn(&e.hist, syms)
	lo, hi := 255, 0
	for s, c := range e.hist {
		if c != 0 {
			lo, hi = min(lo, s), max(hi, s)
		}
	}
	if lo == hi {
		return ModeRLE
	}
	e.exactTable(lo, hi, uint32(n))
	var bits uint64
	for s, c := range e.hist {
		bits += uint64(c) * uint64(e.ct.bits[s])
	}
	// streams round up to whole bytes: at most 4 more
	if 1+len(e.tbuf)+e.Lens.hdr()+int(bits/8)+4 > min(limit, n) {
		return ModeRaw
	}
	return ModeHuff
}

// appendRecord appends a record of syms in mode, a Huffman one under the
// table tbuf and ct with stream lengths of width lens.
func appendRecord(dst, syms []byte, mode byte, tbuf []byte, ct *codeTable, lens Lens) []byte {
	switch mode {
	case ModeRLE:
		return append(dst, ModeRLE, syms[0])
	case ModeHuff:
		// the size is known exactly: appendStreams never falls back here
		return appendStreams(dst, syms, tbuf, ct, lens)
	}
	return appendRaw(dst, syms)
}

// Screen is AppendExact's first check on a plane of n symbols
// syms[0], syms[step], ..., syms[(n-1)*step] (step > 1: a plane not yet cut
// out of its elements): false means AppendExact would store it raw. With
// minGain > 0 and n >= 1024 it is false when the order-0 entropy of every
// residueSample-th symbol, a lower bound of any Huffman code's size (up to
// the sample's error, about 0.05 bit for 4096 samples of 256 values, far
// below the 5 % it screens for), misses the gain.
func (e *Encoder) Screen(syms []byte, step, n, minGain int) bool {
	if minGain <= 0 || n < 1024 {
		return true
	}
	limit := n - n*minGain/256
	e.hist = [256]uint32{}
	total := 0
	for i := 0; i < n; i += residueSample {
		e.hist[syms[i*step]]++
		total++
	}
	// total*log2(total) - sum c*log2(c)
	bits := xlog2x(uint32(total))
	for _, c := range e.hist {
		if c > 1 {
			bits -= xlog2x(c)
		}
	}
	return bits*float64(n)/float64(total)/8 <= float64(limit)
}

// xlog2xTab[c] = c*log2(c) for the counts of a 65536-symbol block's sample.
var xlog2xTab = func() (t [1<<16/residueSample + 1]float64) {
	for c := 2; c < len(t); c++ {
		t[c] = float64(c) * math.Log2(float64(c))
	}
	return
}()

func xlog2x(c uint32) float64 {
	if int(c) < len(xlog2xTab) {
		return xlog2xTab[c]
	}
	return float64(c) * math.Log2(float64(c))
}

// histogramFn is the histogram in use (assembly where available).
var histogramFn = histogram

// histogram counts syms into h with four sub-histograms (runs of equal
// symbols would otherwise serialise on one counter).
func histogram(h *[256]uint32, syms []byte) {
	var h1, h2, h3 [256]uint32
	*h = [256]uint32{}
	i := 0
	for ; i+4 <= len(syms); i += 4 {
		h[syms[i]]++
		h1[syms[i+1]]++
		h2[syms[i+2]]++
		h3[syms[i+3]]++
	}
	for ; i < len(syms); i++ {
		h[syms[i]]++
	}
	for s := range h {
		h[s] += h1[s] + h2[s] + h3[s]
	}
}

// exactTable makes e.cur, e.ct and e.tbuf code every symbol of e.hist
// (window [lo, hi], or a narrower one with escaped tails: escapeWindow),
// unless the previous exact table codes them within 1/reuseDiv of the
// window's optimal lengths.
func (e *Encoder) exactTable(lo, hi int, total uint32) {
	nwin := hi - lo + 1
	cnt := e.cnt[:nwin]
	copy(cnt, e.hist[lo:hi+1])
	// The previous table is kept when it codes the window within
	// 1/reuseDiv of the optimal length-limited code, which saves building
	// one (escapeWindow included). Plain Huffman's cost is at most that
	// code's, so a table within 1/reuseDiv of it is kept without
	// package-merge (most of a build where the limit binds).
	var old uint64
	keep := e.have && e.exact
	for i, c := range cnt {
		if keep && c > 0 {
			keep = e.ct.bits[lo+i] != 0
			old += uint64(c) * uint64(e.ct.bits[lo+i])
		}
	}
	lens := e.nlens[:nwin+1]
	lens[nwin] = 0 // no escape
	limited := plainLengths(cnt, lens[:nwin], &e.bs) > MaxCodeLen
	bits := codeBits(cnt, lens[:nwin])
	if keep && old <= bits+bits/reuseDiv {
		return
	}
	if limited {
		clear(lens[:nwin])
		packageMerge(e.bs.w, lens[:nwin], MaxCodeLen, &e.bs.pm)
		bits = codeBits(cnt, lens[:nwin])
		if keep && old <= bits+bits/reuseDiv {
			return
		}
		if lo2, hi2, ok := e.escapeWindow(lo, hi, total, bits+uint64(8*tableLen(nwin))); ok {
			lo, hi, nwin = lo2, hi2, hi2-lo2+1
			lens = e.elens[:nwin+1]
		}
	}
	t := &e.cur
	t.lo, t.nwin = lo, nwin
	t.lens = [257]uint8{}
	copy(t.lens[:nwin], lens)
	t.lens[escSym] = lens[nwin]
	t.canonical(&e.codes)
	e.ct = codeTable{} // length 0: no code (never written)
	for i := 0; i < nwin; i++ {
		if l := t.lens[i]; l > 0 {
			e.ct.code[lo+i], e.ct.bits[lo+i] = uint32(e.codes[i]), uint32(l)
		}
	}
	if el := uint32(t.lens[escSym]); el > 0 {
		ec := uint32(e.codes[escSym])
		for s := range 256 {
			if s < lo || s > hi {
				e.ct.code[s], e.ct.bits[s] = ec|uint32(s)<<el, el+8
			}
		}
		e.ct.wide = el+8 > MaxCodeLen
	}
	e.tbuf = appendTable(e.tbuf[:0], t)
	e.have, e.exact = true, true
}

// escapeWindow looks for a window [lo2, hi2] inside [lo, hi] (e.hist's
// exact window over total symbols, oldBits the cost of its length-limited
// code, table included) that sends the tails of symbols rarer than 2^-12 of the block
// through the escape (its code plus 8 bits each). It pays where such tails
// are wide: the length limit holds each rare symbol at MaxCodeLen, taking
// code space from the common ones, and each window slot costs 4 table
// bits. The candidate is built only when it trims at least one slot per 5
// escapes (of the demo's float16 blocks with more escapes a slot, all but
// one lost bits, that one gained 50), and returned when it is smaller, its
// lengths in e.elens (the escape's last, at most MaxEscLen).
func (e *Encoder) escapeWindow(lo, hi int, total uint32, oldBits uint64) (int, int, bool) {
	// fewer slots saved at most 100 bits a block on the demo's float16
	// gradients, for 5 % of their encode time
	const minTrim = 16
	th := total >> 12
	l2, h2 := lo, hi
	for l2 < hi && e.hist[l2] <= th {
		l2++
	}
	for h2 > l2 && e.hist[h2] <= th {
		h2--
	}
	trim := l2 - lo + hi - h2
	if h2 == l2 || trim < minTrim {
		return 0, 0, false
	}
	nw := h2 - l2 + 1
	cnt, nl := e.ecnt[:nw+1], e.elens[:nw+1]
	copy(cnt, e.hist[l2:h2+1])
	cnt[nw] = total
	for _, c := range cnt[:nw] {
		cnt[nw] -= c
	}
	if uint64(cnt[nw]) > 5*uint64(trim) {
		return 0, 0, false
	}
	limitedLengths(cnt, nl, MaxCodeLen, &e.bs)
	if nl[nw] > MaxEscLen {
		return 0, 0, false
	}
	bits := uint64(8 * tableLen(nw))
	for i, c := range cnt[:nw] {
		bits += uint64(c) * uint64(nl[i])
	}
	bits += uint64(cnt[nw]) * uint64(nl[nw]+8)
	return l2, h2, bits < oldBits
}

// limitedLengths sets optimal code lengths of at most maxLen bits for
// counts (zero counts get 0; at least two must be non-zero): plain Huffman
// when that fits, else package-merge (Larmore and Hirschberg), which keeps
// the common symbols' lengths where halving the counts would not.
func limitedLengths(counts []uint32, lens []uint8, maxLen int, s *buildScratch) bool {
	if plainLengths(counts, lens, s) <= maxLen {
		return false
	}
	clear(lens)
	packageMerge(s.w, lens, maxLen, &s.pm)
	return true
}

// plainLengths sets Huffman code lengths for counts (zero counts get 0; at
// least two must be non-zero), leaves the non-zero counts sorted in s.w
// for packageMerge, and returns the longest length.
func plainLengths(counts []uint32, lens []uint8, s *buildScratch) int {
	clear(lens)
	w := s.w[:0]
	for i, c := range counts {
		if c > 0 {
			w = append(w, uint64(c)<<16|uint64(i))
		}
	}
	s.w = w
	return huffLengths(w, lens, s) // sorts w
}

// codeBits is the size in bits of counts coded with lengths lens.
func codeBits(counts []uint32, lens []uint8) uint64 {
	var bits uint64
	for i, c := range counts {
		bits += uint64(c) * uint64(lens[i])
	}
	return bits
}

// pmScratch holds package-merge's lists: the leaves' weights, two levels'
// lists at a time, and for every level the number of leaves among each
// prefix of its list. The sizes are powers of two above what is used
// (257 leaves with a sentinel; lists of up to 512 items and 2 sentinels)
// so that masked indexes need no bounds checks.
type pmScratch struct {
	leaves [512]uint64
	w      [2][1024]uint64
	prefix [MaxCodeLen][1024]uint16
}

// pmSentinel ends the leaves and, as the sum of two, the packages: it loses
// every comparison with a real weight (counts are below 2^25).
const pmSentinel = 1 << 61

// packageMerge: w holds count<<16|index sorted by count. Level 0's list is
// the leaves; level l's merges the leaves with the pairs of level l-1's
// list (a leaf first on equal weights). The first 2n-2 items of the top
// list are chosen; a chosen package chooses the first two items per package
// of the level below; a symbol's length is the number of levels where its
// leaf is chosen. Leaves are chosen as a prefix of the sorted leaves at
// every level, so only the count of leaves in each prefix of each level's
// list is kept.
func packageMerge(w []uint64, lens []uint8, maxLen int, s *pmScratch) {
	n := len(w)
	for j := range n {
		s.leaves[j] = w[j] >> 16
		s.w[0][j] = w[j] >> 16
	}
	s.leaves[n] = pmSentinel
	var size [MaxCodeLen]int // of each level's list
	size[0] = n
	for l := 1; l < maxLen; l++ {
		np := size[l-1] / 2
		size[l] = n + np
		prev := &s.w[(l-1)%2]
		prev[2*np], prev[2*np+1] = pmSentinel/2, pmSentinel/2 // an odd last item is never paired
		mergeLevel(&s.leaves, prev, &s.w[l%2], &s.prefix[l], n+np)
	}
	sel := 2*n - 2
	for l := maxLen - 1; l >= 0 && sel > 0; l-- {
		k := min(sel, n) // level 0: all leaves
		if l > 0 {
			k = int(s.prefix[l][min(sel, size[l])])
		}
		for j := range k {
			lens[w[j]&0xffff]++
		}
		sel = 2 * (sel - k)
	}
}

// mergeLevel writes the m items of a level's list into cur, the sorted
// leaves merged with the pairs of prev (both ended by sentinels), and into
// pre[k] the number of leaves among its first k items. No branch depends
// on the weights: they are unpredictable, and mispredictions were most of
// package-merge's time.
func mergeLevel(leaves *[512]uint64, prev, cur *[1024]uint64, pre *[1024]uint16, m int) {
	i, p := 0, 0
	for k := 0; k < m; k++ {
		a, b := leaves[i&511], prev[(2*p)&1023]+prev[(2*p+1)&1023]
		leaf := 0
		if a <= b {
			leaf = 1
		}
		cur[k&1023] = min(a, b)
		i += leaf
		p += 1 - leaf
		pre[(k+1)&1023] = uint16(i)
	}
}
