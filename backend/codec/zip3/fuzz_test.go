package zip3

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/zipccl/zipccl/backend/codec/internal/fuzzseed"
)

func fuzzSeeds() (out [][]any) {
	var e Encoder
	for _, f := range []Format{BF16, FP32, FP16, E5M2, E4M3} {
		for _, n := range []int{1, 33, 200} {
			src := randBytes(n*f.ElemSize(), uint64(n))
			if f == BF16 {
				src = gaussBF16(n, 0.1, uint64(n))
			}
			w := ChooseWindow(f, src, n)
			st := make([]byte, StaticLen(f, n))
			esc, _, _ := e.EncodeBlock(st, nil, src, f, w)
			out = append(out, []any{st, esc, uint8(f), w.Mode, w.Base, uint16(n)})
		}
	}
	return out
}

// FuzzDecodeBlock feeds arbitrary static arrays, escapes and windows to the
// block decoder: it must never panic, and every kernel must reach the same
// verdict and output as the portable one.
func FuzzDecodeBlock(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s[0].([]byte), s[1].([]byte), s[2].(uint8), s[3].(uint8), s[4].(uint8), s[5].(uint16))
	}
	f.Fuzz(func(t *testing.T, st, esc []byte, fb, mode, base uint8, n uint16) {
		ff := Format(fb%5 + 1)
		if n == 0 {
			return
		}
		nn := int(n)
		if l := StaticLen(ff, nn); len(st) != l {
			// pad or cut to the right length so the decoder gets past the size check
			st = append(st, make([]byte, max(0, l-len(st)))...)[:l]
		}
		w := Window{Mode: mode % 3, Base: base}
		var d Decoder
		out1 := make([]byte, nn*ff.ElemSize())
		c1, err1 := d.DecodeBlock(out1, st, esc, ff, w)
		for _, k := range Kernels() {
			restore := UseKernel(k)
			out2 := make([]byte, len(out1))
			c2, err2 := d.DecodeBlock(out2, st, esc, ff, w)
			restore()
			if (err1 == nil) != (err2 == nil) {
				t.Fatalf("kernel %s disagrees: %v vs %v", k, err1, err2)
			}
			if err1 == nil && (c1 != c2 || !bytes.Equal(out1, out2)) {
				t.Fatalf("kernel %s decodes differently", k)
			}
		}
		if err1 == nil {
			// a block that decodes re-encodes to the same bytes
			var e Encoder
			st2 := make([]byte, len(st))
			esc2, _, c3 := e.EncodeBlock(st2, nil, out1, ff, w)
			if !bytes.Equal(st, st2) || !bytes.Equal(esc, esc2) || c3 != c1 {
				t.Fatal("decoded block does not re-encode to the same bytes")
			}
		}
	})
}

func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_CORPUS") == "" {
		t.Skip("set ZIPCCL_WRITE_CORPUS=1")
	}
	for i, s := range fuzzSeeds() {
		if err := fuzzseed.Write("FuzzDecodeBlock", fmt.Sprintf("seed%02d", i), s...); err != nil {
			t.Fatal(err)
		}
	}
}
