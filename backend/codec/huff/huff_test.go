package huff

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

func gaussExp(n int, sigma float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		v := math.Float32bits(float32(r.NormFloat64() * sigma))
		b[i] = byte(v >> 23)
	}
	return b
}

func entropy(b []byte) float64 {
	var h [256]int
	for _, v := range b {
		h[v]++
	}
	e := 0.0
	for _, c := range h {
		if c > 0 {
			p := float64(c) / float64(len(b))
			e -= p * math.Log2(p)
		}
	}
	return e
}

func rt(t *testing.T, e *Encoder, d *Decoder, syms []byte) []byte {
	t.Helper()
	return checkRecord(t, d, syms, e.AppendBlock(nil, syms))
}

// checkRecord: rec is at most one byte longer than syms and decodes to
// them, consuming all of rec.
func checkRecord(t testing.TB, d *Decoder, syms, rec []byte) []byte {
	t.Helper()
	if len(rec) > len(syms)+1 {
		t.Fatalf("expanded: %d > %d", len(rec), len(syms)+1)
	}
	out := make([]byte, len(syms))
	m, err := d.DecodeBlock(out, rec)
	if err != nil {
		t.Fatalf("n=%d: %v", len(syms), err)
	}
	if m != len(rec) || !bytes.Equal(out, syms) {
		t.Fatalf("n=%d mismatch (m=%d len=%d)", len(syms), m, len(rec))
	}
	return rec
}

func TestRoundTrip(t *testing.T) {
	var e Encoder
	var d Decoder
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 2, 3, 5, 17, 100, 1023, 1024, 4097, 65536} {
		rt(t, &e, &d, gaussExp(n, 0.02, uint64(n)))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		rt(t, &e, &d, b)
		rt(t, &e, &d, bytes.Repeat([]byte{7}, n))
	}
	for _, sigma := range []float64{1e-4, 0.02, 1, 1000} {
		s := gaussExp(65536, sigma, 3)
		rec := rt(t, &e, &d, s)
		bits := float64(len(rec)) * 8 / float64(len(s))
		t.Logf("sigma %g: H=%.4f coded %.4f bits/sym", sigma, entropy(s), bits)
	}
}

func TestAdversary(t *testing.T) {
	// sampled positions narrow, the rest spread over all 256 values
	var e Encoder
	var d Decoder
	n := 65536
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(5, 5))
	for i := range b {
		if i%sampleStride == 0 {
			b[i] = 120 + byte(i/sampleStride%3)
		} else if i%97 == 1 {
			b[i] = byte(r.Uint32())
		} else {
			b[i] = 121
		}
	}
	rt(t, &e, &d, b)
}

func TestStreamKernels(t *testing.T) {
	var e Encoder
	wideGroups := 0
	for _, c := range []struct{ n, every int }{
		{0, 7}, {1, 7}, {2, 7}, {3, 7}, {4, 7}, {5, 7}, {6, 7}, {7, 7}, {9, 7}, {10, 7}, {11, 7}, {100, 7}, {4097, 7},
		// escapes close together: groups of five too long for one flush
		{4097, 2}, {4097, 3}, {1000, 1},
	} {
		n := c.n
		s := gaussExp(n, 0.3, uint64(n))
		var narrow [256]uint32 // the Gaussian symbols only
		for _, v := range s {
			narrow[v]++
		}
		for i := 0; i < n; i += c.every {
			s[i] = byte(i) // escapes too
		}
		e.hist = [256]uint32{}
		for _, v := range s {
			e.hist[v]++
		}
		// a sampled table and, where there are two symbols or more, an
		// exact one (codes of at most 11 bits)
		e.Reset()
		e.chooseTable(0, 255)
		tables := []codeTable{e.ct}
		if c.every < 7 {
			// a sampled table of the Gaussian symbols' window, which
			// escapes the others (escape code and 8 bits: wide codes)
			e.hist = narrow
			lo, hi := 255, 0
			for v, k := range narrow {
				if k > 0 {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
			e.Reset()
			e.chooseTable(lo, hi)
			tables = []codeTable{e.ct}
		} else if n > 1 {
			e.Reset()
			e.exactTable(0, 255, uint32(len(s)))
			tables = append(tables, e.ct)
		}
		for _, ct := range tables {
			wideGroups += groupsPastFlush(s, &ct)
			out1 := make([]byte, n*3+16)
			out2 := make([]byte, n*3+16)
			w1 := encodeStream(out1, s, &ct)
			w2 := encodeStreamFn(out2, s, &ct)
			if w1 != w2 || string(out1[:w1]) != string(out2[:w2]) {
				t.Fatalf("n=%d wide=%v: stream kernels differ (%d vs %d bytes)", n, ct.wide, w1, w2)
			}
		}
	}
	if isAsm && wideGroups == 0 {
		t.Fatal("no group of five codes too long for one flush: the assembly's three-code path went untested")
	}
}

// groupsPastFlush counts the groups of five codes that encodeStreamBMI2
// must take three at a time (more than 63 bits with the bits left over)
// when syms is coded under a wide table ct.
func groupsPastFlush(syms []byte, ct *codeTable) int {
	if !ct.wide {
		return 0
	}
	groups, left := 0, uint32(0)
	for i := 0; i+5 <= len(syms); {
		sum := left
		for _, v := range syms[i : i+5] {
			sum += ct.bits[v]
		}
		if sum <= 63 {
			left, i = sum&7, i+5
			continue
		}
		groups++
		sum = left + ct.bits[syms[i]] + ct.bits[syms[i+1]] + ct.bits[syms[i+2]]
		left, i = sum&7, i+3
	}
	return groups
}

func TestHistogramKernels(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 1000, 65536} {
		for _, s := range [][]byte{gaussExp(n, 0.3, uint64(n)), fp16Plane(n, 0.02, uint64(n)), make([]byte, n)} {
			var want, got [256]uint32
			histogram(&want, s)
			histogramFn(&got, s)
			if want != got {
				t.Fatalf("n=%d: histogram kernels differ", n)
			}
		}
	}
}
