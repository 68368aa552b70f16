package codec

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/codec/huff"
	"github.com/zipccl/zipccl/backend/dtype"
)

// fp16Valued is float32 data whose values are float16 numbers (the low 13
// mantissa bits zero), as in rows of a checkpoint that never left float16:
// the two low byte planes are worth coding.
func fp16Valued(n int, seed uint64) []byte {
	b := gauss(dtype.Float32, n, 0.05, seed)
	for i := 0; i < n; i++ {
		v := binary.LittleEndian.Uint32(b[4*i:])
		binary.LittleEndian.PutUint32(b[4*i:], v&^0x1fff)
	}
	return b
}

// TestHuff2RoundTrip: bit-exact round trips at block-edge sizes, for
// specials (NaN payloads, infinities, subnormals, signed zeros), all-equal
// blocks next to ordinary ones, and planes that are coded; both layouts.
func TestHuff2RoundTrip(t *testing.T) {
	b := 1 << huff2BlockLog
	for _, k := range []Kind{Huff2, Huff2Packed} {
		for _, dt := range codedTypes {
			for _, n := range []int{1, 2, 3, 127, 128, 129, b - 1, b, b + 1, 2*b + 77} {
				roundTrip(t, specials(dt, n, uint64(n)), dt, k)
				roundTrip(t, gauss(dt, n, 1e-3, uint64(n)), dt, k)
				mixed := append(constant(dt, min(n, b), 0.5), gauss(dt, n, 3, 7)...)
				roundTrip(t, mixed, dt, k)
			}
		}
		roundTrip(t, fp16Valued(3*b+5, 1), dtype.Float32, k)
	}
}

// unpackHuff2 rewrites a packed huff2 frame in huff2's aligned layout:
// 16-byte index entries, uint32 stream lengths, both parts padded to 128.
func unpackHuff2(t *testing.T, frame []byte) []byte {
	t.Helper()
	h, err := PeekHeader(frame)
	if err != nil || h.Kind != Huff2Packed {
		t.Fatalf("not a packed huff2 frame: %v %v", h.Kind, err)
	}
	p := mustPlan(h.Numel, h.DType, Huff2)
	out := make([]byte, HeaderLen+p.staticLen)
	for i := range p.nblocks {
		copy(out[HeaderLen+IndexEntry*i:], frame[HeaderLen+packedEntry*i:][:packedEntry])
	}
	dyn := frame[HeaderLen+h.StaticLen : h.FrameLen]
	for i := range p.nblocks {
		_, n, _, _ := p.block(i)
		for range huff2Planes(p.f) {
			switch dyn[0] {
			case huff.ModeRaw:
				out, dyn = append(out, dyn[:1+n]...), dyn[1+n:]
			case huff.ModeRLE:
				out, dyn = append(out, dyn[:2]...), dyn[2:]
			default:
				tl := 3 + (int(dyn[2])+3)/2 // mode, lo, nwin-1, lengths
				out, dyn = append(out, dyn[:tl]...), dyn[tl:]
				total := 0
				for k := range 4 {
					l := int(binary.LittleEndian.Uint16(dyn[2*k:]))
					out, total = binary.LittleEndian.AppendUint32(out, uint32(l)), total+l
				}
				out, dyn = append(out, dyn[8:8+total]...), dyn[8+total:]
			}
		}
	}
	if len(dyn) != 0 {
		t.Fatalf("%d bytes after the records", len(dyn))
	}
	out = padTo(out, HeaderLen+p.staticLen)
	putHeader(out, &p, len(out)-HeaderLen-p.staticLen)
	return out
}

// TestHuff2Packed: a packed frame holds huff2's records and CRCs, only
// laid out without alignment (unpackHuff2 of it is the huff2 frame), and
// saves at least the index's 12 bytes a block and its padding (and is
// coded where huff2's frame falls back to raw, on a few more bytes).
func TestHuff2Packed(t *testing.T) {
	b := 1 << huff2BlockLog
	for _, dt := range codedTypes {
		for _, n := range []int{1, 129, b, 3*b + 77} {
			for name, src := range map[string][]byte{
				"gauss": gauss(dt, n, 0.02, uint64(n)), "specials": specials(dt, n, uint64(n)),
				"mixed": append(constant(dt, min(n, b), 0.5), gauss(dt, n, 3, 7)...),
			} {
				var e Encoder
				packed, err := e.Encode(nil, src, dt, Huff2Packed)
				require.NoError(t, err)
				if e.Kind() != Huff2Packed {
					t.Fatalf("%v %s %d: %v", dt, name, n, e.Kind())
				}
				aligned, err := e.Encode(nil, src, dt, Huff2)
				require.NoError(t, err)
				if e.Kind() == Raw { // the aligned layout's few more bytes
					require.Less(t, len(packed), len(aligned), "%v %s %d", dt, name, n)
					continue
				}
				require.True(t, bytes.Equal(aligned, unpackHuff2(t, packed)), "%v %s %d", dt, name, len(src))
				nb := (len(src)/dt.Size() + b - 1) / b
				require.LessOrEqual(t, len(packed), len(aligned)-alignUp(IndexEntry*nb)+packedEntry*nb, "%v %s %d", dt, name, n)
			}
		}
	}
}

// huff2Modes returns the mode byte of every plane record of every block.
func huff2Modes(t *testing.T, frame []byte) [][]byte {
	t.Helper()
	h, err := PeekHeader(frame)
	if err != nil || h.Kind != Huff2 {
		t.Fatalf("not a huff2 frame: %v %v", h.Kind, err)
	}
	f, _ := zformat(h.DType)
	dyn := frame[HeaderLen+h.StaticLen:]
	var d huff.Decoder
	var modes [][]byte
	for left := h.Numel; left > 0; left -= 1 << huff2BlockLog {
		n := min(left, 1<<huff2BlockLog)
		var m []byte
		for i := 0; i < huff2Planes(f); i++ {
			m = append(m, dyn[0])
			used, err := d.DecodeBlock(make([]byte, n), dyn)
			if err != nil {
				t.Fatal(err)
			}
			dyn = dyn[used:]
		}
		modes = append(modes, m)
	}
	return modes
}

// TestHuff2Planes checks the encoder's choices record by record: exponents
// coded, near-uniform residues raw, zero low bytes coded, one value a run.
func TestHuff2Planes(t *testing.T) {
	var e Encoder
	n := 1 << huff2BlockLog
	enc := func(src []byte, dt dtype.DType) []byte {
		f, err := e.Encode(nil, src, dt, Huff2)
		if err != nil || e.Kind() != Huff2 {
			t.Fatalf("%v: kind %v, %v", dt, e.Kind(), err)
		}
		return f
	}
	want := func(name string, got, want []byte) {
		if !bytes.Equal(got, want) {
			t.Errorf("%s: plane modes %v, want %v", name, got, want)
		}
	}
	H, R, L := byte(huff.ModeHuff), byte(huff.ModeRaw), byte(huff.ModeRLE)
	want("gauss fp32", huff2Modes(t, enc(gauss(dtype.Float32, n, 0.02, 1), dtype.Float32))[0], []byte{H, R, R, R})
	want("gauss bf16", huff2Modes(t, enc(gauss(dtype.BFloat16, n, 0.02, 1), dtype.BFloat16))[0], []byte{H, R})
	want("gauss fp16", huff2Modes(t, enc(gauss(dtype.Float16, n, 0.02, 1), dtype.Float16))[0], []byte{H, R})
	// bits 12..0 zero: byte 0 is always 0 (a run), byte 1 has 8 values
	want("fp16-valued fp32", huff2Modes(t, enc(fp16Valued(n, 2), dtype.Float32))[0], []byte{H, R, H, L})
	want("constant bf16", huff2Modes(t, enc(constant(dtype.BFloat16, n, 0.75), dtype.BFloat16))[0], []byte{L, L})
}

// TestHuff2NotWorse: on data with nothing under the exponent to gain,
// huff2 stays within one byte per plane and block of huff (plus the
// table-quality gain); on fp16-valued fp32 it gains the low bytes.
func TestHuff2NotWorse(t *testing.T) {
	for _, c := range []struct {
		dt  dtype.DType
		src []byte
	}{
		{dtype.BFloat16, gauss(dtype.BFloat16, 300000, 0.02, 3)},
		{dtype.Float16, gauss(dtype.Float16, 300000, 0.1, 3)},
		{dtype.Float32, gauss(dtype.Float32, 300000, 0.02, 3)},
		{dtype.Float8E4M3FN, gauss(dtype.Float8E4M3FN, 300000, 1, 3)},
	} {
		h, h2 := ratioOf(t, c.src, c.dt, Huff), ratioOf(t, c.src, c.dt, Huff2)
		t.Logf("%v: huff %.5f huff2 %.5f", c.dt, h, h2)
		if h2 < h*0.9995 {
			t.Errorf("%v: huff2 %.5f < huff %.5f", c.dt, h2, h)
		}
	}
	src := fp16Valued(300000, 4)
	h, h2 := ratioOf(t, src, dtype.Float32, Huff), ratioOf(t, src, dtype.Float32, Huff2)
	t.Logf("fp16-valued fp32: huff %.4f huff2 %.4f", h, h2)
	if h2 < 1.5*h { // 13 of 24 residue bits are zero: 32/(3+11+~1)
		t.Errorf("fp16-valued fp32: huff2 %.4f, huff %.4f", h2, h)
	}
}
