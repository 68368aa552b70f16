package huff

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func rtExact(t testing.TB, e *Encoder, d *Decoder, syms []byte, gain int) []byte {
	t.Helper()
	return checkRecord(t, d, syms, e.AppendExact(nil, syms, gain))
}

// geometric symbols: P(k) ~ 2^-k/q, a long tail that plain Huffman codes
// with more than MaxCodeLen bits.
func geometric(n int, q float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		k := 0
		for k < 200 && r.Float64() < q {
			k++
		}
		b[i] = byte(40 + k)
	}
	return b
}

func TestExactRoundTrip(t *testing.T) {
	var e Encoder
	var d Decoder
	r := rand.New(rand.NewPCG(2, 2))
	for _, n := range []int{1, 2, 3, 5, 17, 100, 1023, 1024, 4097, 65536} {
		rtExact(t, &e, &d, gaussExp(n, 0.02, uint64(n)), 0)
		rtExact(t, &e, &d, geometric(n, 0.6, uint64(n)), 0)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		rtExact(t, &e, &d, b, 0)
		rtExact(t, &e, &d, b, 13)
		rtExact(t, &e, &d, bytes.Repeat([]byte{7}, n), 0)
	}
}

// TestLens16: records with uint16 stream lengths (packed huff2 frames)
// decode with a Decoder set to them and differ from uint32 ones only in
// the stream header; a stream too long for 16 bits makes a raw record.
func TestLens16(t *testing.T) {
	var e32, e16 Encoder
	e16.Lens = Lens16
	d16 := Decoder{Lens: Lens16}
	for _, n := range []int{1, 5, 100, 4097, 65536} {
		for _, syms := range [][]byte{gaussExp(n, 0.02, uint64(n)), geometric(n, 0.6, uint64(n)), bytes.Repeat([]byte{7}, n)} {
			r32 := e32.AppendExact(nil, syms, 0)
			r16 := checkRecord(t, &d16, syms, e16.AppendExact(nil, syms, 0))
			if l, err := RecordLen(r16, n, Lens16); err != nil || l != len(r16) {
				t.Fatalf("n=%d: RecordLen %d (%v), record %d bytes", n, l, err, len(r16))
			}
			if r32[0] != ModeHuff || r16[0] != ModeHuff {
				if !bytes.Equal(r32, r16) {
					t.Fatalf("n=%d: raw or run records differ", n)
				}
				continue
			}
			tl := tableLen(int(r32[2]) + 1)
			var want []byte
			want = append(want, r32[:1+tl]...)
			for k := range 4 {
				l := int(r32[1+tl+4*k]) | int(r32[2+tl+4*k])<<8 | int(r32[3+tl+4*k])<<16
				want = append(want, byte(l), byte(l>>8))
			}
			want = append(want, r32[1+tl+16:]...)
			if !bytes.Equal(r16, want) {
				t.Fatalf("n=%d: uint16 record is not the uint32 one with short lengths", n)
			}
		}
	}
	// 2^20 symbols of about 3.5 bits: streams of about 115 KB
	syms := gaussExp(1<<20, 0.02, 9)
	if r := e32.AppendExact(nil, syms, 0); r[0] != ModeHuff {
		t.Fatal("uint32 lengths: not coded")
	}
	if r := checkRecord(t, &d16, syms, e16.AppendExact(nil, syms, 0)); r[0] != ModeRaw {
		t.Fatal("uint16 lengths: a stream past 65535 bytes was not stored raw")
	}
}

// TestExactModes: one symbol is a run record, uniform bytes stay raw, a
// skewed plane is coded, and minGain turns a small saving into raw.
func TestExactModes(t *testing.T) {
	var e Encoder
	var d Decoder
	if rec := rtExact(t, &e, &d, bytes.Repeat([]byte{9}, 5000), 0); rec[0] != ModeRLE || len(rec) != 2 {
		t.Fatalf("run: %v", rec[:2])
	}
	r := rand.New(rand.NewPCG(5, 5))
	uni := make([]byte, 65536)
	for i := range uni {
		uni[i] = byte(r.Uint32())
	}
	if rec := rtExact(t, &e, &d, uni, 13); rec[0] != ModeRaw {
		t.Fatal("uniform bytes were coded")
	}
	// 20 % zeros among uniform bytes: about 0.6 bit per symbol saved (7 %)
	sk := append([]byte{}, uni...)
	for i := range sk {
		if r.IntN(5) == 0 {
			sk[i] = 0
		}
	}
	if rec := rtExact(t, &e, &d, sk, 13); rec[0] != ModeHuff {
		t.Fatal("a plane saving 7 % was not coded")
	}
	if rec := rtExact(t, &e, &d, sk, 64); rec[0] != ModeRaw {
		t.Fatal("a plane saving 7 % was coded with minGain 25 %")
	}
}

// TestLimitedLengths checks package-merge against the definition: lengths
// within the limit, Kraft sum exactly 1, and no worse than halving the
// counts (the sampled tables' method); equal to Huffman when that fits.
func TestLimitedLengths(t *testing.T) {
	var s buildScratch
	r := rand.New(rand.NewPCG(9, 9))
	for trial := 0; trial < 300; trial++ {
		n := 2 + r.IntN(255)
		cnt := make([]uint32, n)
		for i := range cnt {
			switch trial % 3 {
			case 0:
				cnt[i] = uint32(1 + r.IntN(1000))
			case 1: // steep tail: plain Huffman exceeds 11 bits
				cnt[i] = uint32(1) << min(i, 30) >> 10
				cnt[i]++
			default:
				if r.IntN(3) > 0 {
					cnt[i] = uint32(r.ExpFloat64() * 50)
				}
			}
		}
		cnt[0], cnt[1] = max(cnt[0], 1), max(cnt[1], 1)
		pm := make([]uint8, n)
		limitedLengths(cnt, pm, MaxCodeLen, &s)
		hl := make([]uint8, n)
		buildLengths(cnt, hl, MaxCodeLen, &s)
		un := make([]uint8, n)
		buildLengths(cnt, un, 64, &s)
		// exactTable keeps a table within 1/reuseDiv of plain Huffman's
		// cost without package-merge: that cost must be at most the
		// limited code's
		pl := make([]uint8, n)
		plainMax := plainLengths(cnt, pl, &s)
		if costPL := codeBits(cnt, pl); costPL > codeBits(cnt, pm) {
			t.Fatalf("trial %d: plain Huffman %d bits > limited %d", trial, costPL, codeBits(cnt, pm))
		}
		var kraft, costPM, costH, costU uint64
		maxU := 0
		for i, c := range cnt {
			if (c == 0) != (pm[i] == 0) || pm[i] > MaxCodeLen {
				t.Fatalf("trial %d: symbol %d count %d length %d", trial, i, c, pm[i])
			}
			if pm[i] > 0 {
				kraft += 1 << (MaxCodeLen - pm[i])
			}
			costPM += uint64(c) * uint64(pm[i])
			costH += uint64(c) * uint64(hl[i])
			costU += uint64(c) * uint64(un[i])
			maxU = max(maxU, int(un[i]))
		}
		if kraft != 1<<MaxCodeLen {
			t.Fatalf("trial %d: Kraft sum %d/2048", trial, kraft)
		}
		if costPM > costH {
			t.Fatalf("trial %d: package-merge %d bits > halving %d", trial, costPM, costH)
		}
		if maxU <= MaxCodeLen && costPM != costU {
			t.Fatalf("trial %d: %d bits, Huffman %d", trial, costPM, costU)
		}
		if plainMax != maxU || codeBits(cnt, pl) != costU {
			t.Fatalf("trial %d: plain lengths up to %d, %d bits; Huffman up to %d, %d bits", trial, plainMax, codeBits(cnt, pl), maxU, costU)
		}
	}
}

// FuzzExactRoundTrip codes arbitrary symbols with exact tables.
func FuzzExactRoundTrip(f *testing.F) {
	f.Add(gaussExp(500, 1, 1), uint8(0))
	f.Add(geometric(3000, 0.7, 1), uint8(13))
	f.Add(sparseTails(8192, 1), uint8(0)) // escaped tails (escapeWindow)
	f.Fuzz(func(t *testing.T, syms []byte, gain uint8) {
		if len(syms) == 0 {
			return
		}
		var e Encoder
		var d Decoder
		rtExact(t, &e, &d, syms, int(gain))
		// the encoder keeps its table across blocks: a second block too
		rtExact(t, &e, &d, syms[len(syms)/2:], int(gain))
	})
}

// sparseTails: symbols of a narrow core (100..140, a binomial spread) and,
// one in every 300, a rare symbol anywhere in 10..99 or 141..200: wide
// tails like the float16 exponents of activations.
func sparseTails(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	b := make([]byte, n)
	for i := range b {
		if r.IntN(300) == 0 {
			s := 10 + r.IntN(150)
			if s >= 100 {
				s += 41
			}
			b[i] = byte(s)
			continue
		}
		s := 100
		for range 40 {
			s += r.IntN(2)
		}
		b[i] = byte(s)
	}
	return b
}

// noEscapeBytes is a lower bound of the length of the record coding syms
// with the exact window and no escape: its table plus its optimal
// lengths' bits, rounded down.
func noEscapeBytes(syms []byte) int {
	var h [256]uint32
	histogram(&h, syms)
	lo, hi := 255, 0
	for s, c := range h {
		if c > 0 {
			lo, hi = min(lo, s), max(hi, s)
		}
	}
	lens := make([]uint8, hi-lo+1)
	var bs buildScratch
	limitedLengths(h[lo:hi+1], lens, MaxCodeLen, &bs)
	var bits uint64
	for i, l := range lens {
		bits += uint64(h[lo+i]) * uint64(l)
	}
	return 1 + tableLen(hi-lo+1) + Lens32.hdr() + int(bits/8)
}

// TestExactEscapeWindow: wide tails of rare symbols go through the escape
// when that is smaller than the exact window (and the record decodes to
// the symbols), and a plain exponent distribution keeps its exact window.
func TestExactEscapeWindow(t *testing.T) {
	var d Decoder
	for seed := uint64(1); seed <= 20; seed++ {
		var e Encoder
		syms := sparseTails(65536, seed)
		rec := rtExact(t, &e, &d, syms, 0)
		var tb table
		if _, err := parseTable(rec[1:], &tb); err != nil || rec[0] != ModeHuff {
			t.Fatalf("seed %d: mode %d, table: %v", seed, rec[0], err)
		}
		if tb.lens[escSym] == 0 || tb.lens[escSym] > MaxEscLen {
			t.Fatalf("seed %d: escape length %d", seed, tb.lens[escSym])
		}
		if bound := noEscapeBytes(syms); len(rec) >= bound {
			t.Fatalf("seed %d: %d bytes with the escape, the exact window needs at least %d", seed, len(rec), bound)
		}
		// the next block keeps the table: its escaped symbols still decode
		rtExact(t, &e, &d, sparseTails(65536, seed+100), 0)
	}
	var e Encoder
	rec := rtExact(t, &e, &d, gaussExp(65536, 0.02, 4), 0)
	var tb table
	if _, err := parseTable(rec[1:], &tb); err != nil || tb.lens[escSym] != 0 {
		t.Fatalf("Gaussian exponents: escape length %d (%v)", tb.lens[escSym], err)
	}
}
