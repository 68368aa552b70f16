package huff

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// withPortable runs fn with the assembly stream decoder and table fill
// switched off.
func withPortable(fn func()) {
	q, l := useQuad, useLUTAsm
	useQuad, useLUTAsm = false, false
	defer func() { useQuad, useLUTAsm = q, l }()
	fn()
}

// decodeBoth decodes rec into n symbols with the kernel in use and with the
// portable decoder and fails unless both agree (output, length, error class).
func decodeBoth(t *testing.T, rec []byte, n int) ([]byte, error) {
	t.Helper()
	var d1, d2 Decoder
	out1, out2 := make([]byte, n), make([]byte, n)
	m1, err1 := d1.DecodeBlock(out1, rec)
	var m2 int
	var err2 error
	withPortable(func() { m2, err2 = d2.DecodeBlock(out2, rec) })
	if (err1 == nil) != (err2 == nil) || m1 != m2 {
		t.Fatalf("n=%d: kernel (%d, %v) and portable (%d, %v) disagree", n, m1, err1, m2, err2)
	}
	if err1 == nil && !bytes.Equal(out1, out2) {
		t.Fatalf("n=%d: kernel and portable outputs differ", n)
	}
	if err1 != nil && !errors.Is(err1, ErrCorrupt) {
		t.Fatalf("n=%d: %v is not ErrCorrupt", n, err1)
	}
	return out1, err1
}

// quadRecords returns records of every shape the stream kernel meets, and
// their symbol counts: sampled tables with escapes, exact tables, runs of
// long codes, streams that end far apart, sizes around the kernel's bounds.
func quadRecords() ([][]byte, []int) {
	var e Encoder
	var recs [][]byte
	var ns []int
	add := func(rec []byte, n int) { recs, ns = append(recs, rec), append(ns, n) }
	for i, n := range []int{quadMin - 1, quadMin, 300, 1000, 4099, 65536} {
		seed := uint64(i + 1)
		for _, sigma := range []float64{0.02, 1, 30} {
			add(e.AppendBlock(nil, gaussExp(n, sigma, seed)), n)
			add(e.AppendExact(nil, gaussExp(n, sigma, seed), 0), n)
		}
		add(e.AppendExact(nil, geometric(n, 0.7, seed), 0), n)
		// a sampled table that misses most values: escapes everywhere
		s := gaussExp(n, 0.02, seed)
		for j := 0; j < n; j += 7 + int(seed) {
			s[j] = byte(j)
		}
		add(e.AppendBlock(nil, s), n)
		// every symbol at once: long codes, one symbol per lookup
		u := make([]byte, n)
		for j := range u {
			u[j] = byte(j * 37)
		}
		add(e.AppendExact(nil, u, 0), n)
		// a quarter of one symbol (short codes, four to a lookup) before
		// three of every symbol (long codes): the first stream ends long
		// before the others, which go on beside a mirror of one of them
		m := make([]byte, n)
		for j := range m {
			m[j] = byte(j * 37)
			if j < n/4 {
				m[j] = 7
			}
		}
		add(e.AppendExact(nil, m, 0), n)
	}
	return recs, ns
}

// TestQuadKernel decodes quadRecords with the kernel in use (the assembly
// where the CPU has it) and the portable decoder, and every record again
// with bit flips, cuts and a table with a hole.
func TestQuadKernel(t *testing.T) {
	if !useQuad {
		t.Log("no stream kernel on this CPU/build: the portable path is checked against itself")
	}
	recs, ns := quadRecords()
	holedErrs := 0
	for i, rec := range recs {
		if rec[0] != ModeHuff {
			continue
		}
		out, err := decodeBoth(t, rec, ns[i])
		if err != nil || len(out) != ns[i] {
			t.Fatalf("record %d: %v", i, err)
		}
		// an incomplete table (one code a bit longer: Kraft sum < 1) has
		// entries of no code, which stop a stream; the kernel's round for
		// tables without an escape must stop where the portable decoder does
		if holed, ok := lengthenShortestCode(rec); ok {
			if _, err := decodeBoth(t, holed, ns[i]); err != nil {
				holedErrs++
			}
		}
		r := rand.New(rand.NewPCG(uint64(i), 5))
		for j := 0; j < 40; j++ {
			bad := bytes.Clone(rec)
			bad[r.IntN(len(bad))] ^= 1 << r.IntN(8)
			decodeBoth(t, bad, ns[i])
			decodeBoth(t, rec[:r.IntN(len(rec))], ns[i])
		}
	}
	if holedErrs == 0 {
		t.Fatal("no record with a lengthened code failed: the stopped-stream path went untried")
	}
}

// lengthenShortestCode returns rec with its shortest code (the first window
// symbol of that length) one bit longer: the codes after it move and the
// table leaves codes unassigned.
func lengthenShortestCode(rec []byte) ([]byte, bool) {
	nwin := int(rec[2]) + 1
	best, bestLen := -1, byte(MaxCodeLen)
	for i := 0; i < nwin; i++ {
		l := rec[3+i/2] >> (4 * (i & 1)) & 0xf
		if l != 0 && l < bestLen {
			best, bestLen = i, l
		}
	}
	if best < 0 {
		return nil, false
	}
	out := bytes.Clone(rec)
	out[3+best/2] += 1 << (4 * (best & 1))
	return out, true
}

// TestFillLUT checks the vector table fill against fillLUT on the tables of
// real records and on arbitrary length tables (any lengths, escapes, holes).
func TestFillLUT(t *testing.T) {
	if !useLUTAsm {
		t.Skip("no vector table fill on this CPU/build")
	}
	var e Encoder
	var ms [][lutSize + 2]uint16
	for i, sigma := range []float64{0.001, 0.02, 1, 30} {
		for _, rec := range [][]byte{e.AppendBlock(nil, gaussExp(5000, sigma, uint64(i))), e.AppendExact(nil, gaussExp(5000, sigma, uint64(i)), 0)} {
			var d Decoder
			if _, err := parseTable(rec[1:], &d.t); err == nil {
				d.buildLUT()
				ms = append(ms, d.multi)
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 50; i++ {
		var m [lutSize + 2]uint16
		for j := range m {
			m[j] = uint16(r.IntN(lutInvalid))<<8 | uint16(r.IntN(256))
		}
		ms = append(ms, m)
	}
	for i := range ms {
		for more := 0; more <= 3; more++ {
			var a, b [lutSize]uint64
			fillLUT(&a, &ms[i], more)
			fillLUTAVX2(&b, &ms[i], more)
			if a != b {
				for v := range a {
					if a[v] != b[v] {
						t.Fatalf("table %d, more=%d, v=%d: vector %#x, Go %#x", i, more, v, b[v], a[v])
					}
				}
			}
		}
	}
}

// TestLUTMore: a table filled with lutMore of its shortest code decodes
// like the full fill: every entry's bits, count and counted symbols agree.
func TestLUTMore(t *testing.T) {
	var e Encoder
	var recs [][]byte
	for i, sigma := range []float64{0.001, 0.02, 1} { // shortest codes 1 and 2 bits
		recs = append(recs, e.AppendBlock(nil, gaussExp(5000, sigma, uint64(i))), e.AppendExact(nil, geometric(5000, 0.6, uint64(i)), 0))
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, k := range []int{6, 8, 12, 16, 24, 40, 64, 100, 200} { // k values about equally likely: 3 to 8 bits
		syms := make([]byte, 20000)
		for j := range syms {
			syms[j] = byte(30 + r.IntN(k))
		}
		recs = append(recs, e.AppendExact(nil, syms, 0))
	}
	seen := map[int]bool{}
	for _, rec := range recs {
		var d Decoder
		if rec[0] != ModeHuff {
			continue
		}
		if _, err := parseTable(rec[1:], &d.t); err != nil {
			t.Fatal(err)
		}
		d.buildLUT()
		minLen := MaxCodeLen
		for j := 0; j < d.t.nwin; j++ {
			if l := int(d.t.lens[j]); l > 0 {
				minLen = min(minLen, l)
			}
		}
		var full [lutSize]uint64
		fillLUT(&full, &d.multi, 3)
		for v := range full {
			a, b := full[v], d.lut[v]
			n := a >> lutCountShift & 7
			keep := uint64(1)<<(lutSymShift+8*n) - 1 // bits, count and the counted symbols
			if a&keep != b&keep {
				t.Fatalf("shortest code %d, v=%d: %#x, full fill %#x", minLen, v, b, a)
			}
		}
		seen[lutMore(minLen)] = true
	}
	if len(seen) != 4 {
		t.Fatalf("tables cover more = %v, want 0 to 3", seen)
	}
}
