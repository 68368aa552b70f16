//go:build !purego

package huff

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"unsafe"
)

// TestQuadEscape runs the kernel on a record whose second stream starts
// with an escaped symbol (one the sampled table does not see) and checks each way out of its escape path: decoded, with the fill bound
// just met; left to Go (stream stuck where it was) with the bound missed by
// one byte; and left to Go when the escaped byte has a code of its own,
// which DecodeBlock then reports.
func TestQuadEscape(t *testing.T) {
	if !useQuad {
		t.Skip("no stream kernel on this CPU/build")
	}
	const n, k = 1028, 1
	o := k * n / 4 // 257: not on the sample's stride
	syms := gaussExp(n, 0.02, 3)
	syms[o] = 0 // far outside the table's window
	var e Encoder
	rec := e.AppendBlock(nil, syms)
	var d Decoder
	got := make([]byte, n)
	if _, err := d.DecodeBlock(got, rec); err != nil || !bytes.Equal(got, syms) {
		t.Fatalf("round trip: %v", err)
	}
	if d.coded[0] || !d.coded[syms[o+1]] {
		t.Fatal("symbol 0 has a code or the next has none: no escape to test")
	}
	tl, err := parseTable(rec[1:], &d.t)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := streamStarts(rec, 1+tl, d.Lens)
	if err != nil {
		t.Fatal(err)
	}
	const groups = 3
	a0 := starts[k] * 8                             // the escape's bit address
	bound := (a0+int(d.escLen)+8)>>3 + 7*(groups-1) // the fill after it, 7 bytes a fill left
	run := func(rec []byte, lim int) (quadState, []byte) {
		out := make([]byte, n)
		sb, ob := uintptr(unsafe.Pointer(&rec[0])), uintptr(unsafe.Pointer(&out[0]))
		st := quadState{single: &d.single, coded: &d.coded, lim: sb + uintptr(lim)}
		for j := 0; j < 4; j++ {
			st.q[j] = sb*8 + uintptr(starts[j]*8)
			st.p[j] = ob + uintptr(j*n/4)
		}
		decodeQuadBMI2(&st, &d.lut, groups)
		st.q[k] -= sb * 8
		st.p[k] -= ob + uintptr(o)
		runtime.KeepAlive(rec)
		return st, out
	}
	st, out := run(rec, bound)
	if e := o + int(st.p[k]); st.stuck[k] != 0 || st.p[k] < 1+4*(groups-1) || !bytes.Equal(out[o:e], syms[o:e]) {
		t.Fatalf("bound met: stuck %d, %d symbols, want the escape and the rest of %d rounds decoded", st.stuck[k], st.p[k], groups)
	}
	st, _ = run(rec, bound-1)
	if st.stuck[k] != 1 || st.q[k] != uintptr(a0) || st.p[k] != 0 {
		t.Fatalf("bound missed by a byte: stuck %d at bit %d with %d symbols, want stuck at %d with 0", st.stuck[k], st.q[k], st.p[k], a0)
	}
	// the escaped byte made the next symbol, which has a code
	bad := bytes.Clone(rec)
	for i, b := 0, a0+int(d.escLen); i < 8; i, b = i+1, b+1 {
		bad[b>>3] &^= 1 << (b & 7)
		bad[b>>3] |= (syms[o+1] >> i & 1) << (b & 7)
	}
	st, _ = run(bad, len(bad)-8)
	if st.stuck[k] != 1 || st.q[k] != uintptr(a0) || st.p[k] != 0 {
		t.Fatalf("coded escape: stuck %d at bit %d with %d symbols, want stuck at %d with 0", st.stuck[k], st.q[k], st.p[k], a0)
	}
	if _, err := d.DecodeBlock(got, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("coded escape decoded: %v", err)
	}
}
