package huff

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/zipccl/zipccl/backend/codec/internal/fuzzseed"
)

func huffSeeds() [][]byte {
	var e Encoder
	var out [][]byte
	for _, n := range []int{1, 7, 100, 3000} {
		out = append(out, e.AppendBlock(nil, gaussExp(n, 0.02, uint64(n))))
	}
	out = append(out, e.AppendBlock(nil, bytes.Repeat([]byte{3}, 50)))
	out = append(out, e.AppendBlock(nil, []byte("incompressible? 0123456789abcdef")))
	return out
}

// FuzzDecodeBlock decodes arbitrary records: never a panic, a record that
// decodes must be exactly as long as reported, and the assembly and portable
// stream decoders agree.
func FuzzDecodeBlock(f *testing.F) {
	for _, r := range huffSeeds() {
		f.Add(r, uint16(100))
	}
	f.Fuzz(func(t *testing.T, rec []byte, n uint16) {
		if n == 0 {
			return
		}
		var d Decoder
		out := make([]byte, n)
		m, err := d.DecodeBlock(out, rec)
		if err == nil && (m <= 0 || m > len(rec)) {
			t.Fatalf("consumed %d of %d", m, len(rec))
		}
		// a second decode with a warm table cache agrees
		out2 := make([]byte, n)
		m2, err2 := d.DecodeBlock(out2, rec)
		if (err == nil) != (err2 == nil) || m != m2 || !bytes.Equal(out, out2) {
			t.Fatal("cached table decodes differently")
		}
		// the four-stream kernel and the portable decoder agree
		decodeBoth(t, rec, int(n))
		// read as a packed frame's record (uint16 stream lengths)
		d16 := Decoder{Lens: Lens16}
		m, err = d16.DecodeBlock(out, rec)
		if err == nil && (m <= 0 || m > len(rec)) {
			t.Fatalf("uint16 lengths: consumed %d of %d", m, len(rec))
		}
		if l, lerr := RecordLen(rec, int(n), Lens16); err == nil && (lerr != nil || l != m) {
			t.Fatalf("uint16 lengths: RecordLen %d (%v), decoded %d", l, lerr, m)
		}
	})
}

// FuzzRoundTrip codes arbitrary symbols.
func FuzzRoundTrip(f *testing.F) {
	f.Add(gaussExp(500, 1, 1))
	f.Add([]byte{0, 255, 0, 255, 1})
	f.Fuzz(func(t *testing.T, syms []byte) {
		if len(syms) == 0 {
			return
		}
		var e Encoder
		var d Decoder
		rt(t, &e, &d, syms)
	})
}

func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_CORPUS") == "" {
		t.Skip("set ZIPCCL_WRITE_CORPUS=1")
	}
	for i, r := range huffSeeds() {
		if err := fuzzseed.Write("FuzzDecodeBlock", fmt.Sprintf("seed%02d", i), r, uint16(max(1, min(len(r)*3, 3000)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := fuzzseed.Write("FuzzRoundTrip", "gauss", gaussExp(300, 0.1, 2)); err != nil {
		t.Fatal(err)
	}
	var e Encoder
	for i, r := range [][]byte{e.AppendExact(nil, geometric(3000, 0.7, 1), 0), e.AppendExact(nil, gaussExp(500, 1, 3), 0)} {
		if err := fuzzseed.Write("FuzzDecodeBlock", fmt.Sprintf("exact%02d", i), r, uint16(map[int]int{0: 3000, 1: 500}[i])); err != nil {
			t.Fatal(err)
		}
	}
	if err := fuzzseed.Write("FuzzExactRoundTrip", "geometric", geometric(2000, 0.8, 4), uint8(13)); err != nil {
		t.Fatal(err)
	}
}
