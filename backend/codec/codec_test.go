package codec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// roundTrip encodes src whole and split, checks the bounds and the decoded
// bytes, and returns the frame.
func roundTrip(t testing.TB, src []byte, dt dtype.DType, k Kind) []byte {
	t.Helper()
	var e Encoder
	var d Decoder
	frame, err := e.Encode([]byte("prefix"), src, dt, k)
	if err != nil {
		t.Fatalf("%v/%v n=%d: encode: %v", dt, k, len(src), err)
	}
	frame = frame[len("prefix"):]
	used := e.Kind()
	if max := MaxEncodedLen(len(src), dt); len(frame) > max {
		t.Fatalf("%v/%v: frame %d > MaxEncodedLen %d", dt, k, len(frame), max)
	}
	h, err := PeekHeader(frame)
	if err != nil {
		t.Fatal(err)
	}
	if h.FrameLen != len(frame) || h.RawLen != len(src) || h.Kind != used || h.DType != dt {
		t.Fatalf("header %+v, frame %d, src %d, kind %v", h, len(frame), len(src), used)
	}
	packed := used == Huff2Packed // no alignment
	if h.StaticLen != StaticLen(h.Numel, dt, used) || (!packed && (h.StaticLen%Align != 0 || h.DynamicLen%Align != 0)) {
		t.Fatalf("static len %d vs StaticLen %d", h.StaticLen, StaticLen(h.Numel, dt, used))
	}
	out := make([]byte, len(src))
	for i := range out {
		out[i] = 0x5a
	}
	m, err := d.Decode(out, append(frame, 1, 2, 3))
	if err != nil {
		t.Fatalf("%v/%v n=%d: decode: %v", dt, k, len(src), err)
	}
	if m != len(frame) || !bytes.Equal(out, src) {
		t.Fatalf("%v/%v n=%d: round trip mismatch", dt, k, len(src))
	}
	// split mode with the resolved kind; a packed frame has none
	if k == Huff2Packed {
		if _, err := e.EncodeStatic(nil, src, dt, k); !errors.Is(err, ErrKind) {
			t.Fatalf("%v/%v: EncodeStatic: %v", dt, k, err)
		}
		if err := d.DecodeSplit(out, frame[HeaderLen:HeaderLen+h.StaticLen], frame[HeaderLen+h.StaticLen:], dt, k); !errors.Is(err, ErrKind) {
			t.Fatalf("%v/%v: DecodeSplit: %v", dt, k, err)
		}
	} else if k != Auto {
		st, err := e.EncodeStatic(nil, src, dt, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != StaticLen(len(src)/dt.Size(), dt, k) {
			t.Fatalf("static %d, StaticLen %d", len(st), StaticLen(len(src)/dt.Size(), dt, k))
		}
		dyn, err := e.EncodeDynamic(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(dyn) > MaxDynamicLen(len(src)/dt.Size(), dt, k) {
			t.Fatalf("dynamic %d > MaxDynamicLen", len(dyn))
		}
		if used == EffectiveKind(dt, k) && !bytes.Equal(append(append([]byte{}, st...), dyn...), frame[HeaderLen:]) {
			t.Fatalf("%v/%v: split parts differ from the frame sections", dt, k)
		}
		clear(out)
		if err := d.DecodeSplit(out, st, dyn, dt, EffectiveKind(dt, k)); err != nil {
			t.Fatalf("%v/%v: DecodeSplit: %v", dt, k, err)
		}
		if !bytes.Equal(out, src) {
			t.Fatalf("%v/%v: split round trip mismatch", dt, k)
		}
	}
	return frame
}

func sizes(short bool) []int {
	s := []int{0, 1, 2, 3, 7, 31, 33, 127, 129, 1000, 16383, 16385}
	if !short {
		s = append(s, 65537, 100003)
	}
	return s
}

func TestRoundTripGenerators(t *testing.T) {
	for _, dt := range codedTypes {
		for _, n := range sizes(testing.Short()) {
			gens := map[string][]byte{
				"uniform": uniform(dt, n, uint64(n)),
				"gauss":   gauss(dt, n, 0.02, uint64(n)),
				"special": specials(dt, n, uint64(n)),
				"const":   constant(dt, n, 0.75),
				"zero":    constant(dt, n, 0),
				"bytes":   randomBytes(n*dt.Size(), uint64(n)),
			}
			for name, src := range gens {
				for _, k := range allKinds {
					t.Run(fmt.Sprintf("%v/%s/%d/%v", dt, name, n, k), func(t *testing.T) {
						roundTrip(t, src, dt, k)
					})
				}
			}
		}
	}
}

func TestRoundTripSigmas(t *testing.T) {
	n := 70000
	for _, dt := range codedTypes {
		for _, sigma := range []float64{1e-4, 1e-3, 0.02, 0.1, 1, 10, 100, 1e3} {
			src := gauss(dt, n, sigma, 42)
			for _, k := range []Kind{Zip3, Huff, Auto} {
				roundTrip(t, src, dt, k)
			}
		}
	}
}

func TestOtherDTypesRaw(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.Float64, dtype.Int8, dtype.UInt8, dtype.Int16, dtype.Int32, dtype.Int64, dtype.Bool} {
		for _, n := range []int{0, 1, 5, 70000} {
			src := randomBytes(n*dt.Size(), 3)
			for _, k := range allKinds {
				f := roundTrip(t, src, dt, k)
				if h, _ := PeekHeader(f); h.Kind != Raw {
					t.Fatalf("%v coded as %v", dt, h.Kind)
				}
			}
		}
	}
}

func TestNoExpansion(t *testing.T) {
	// incompressible data falls back to raw: never above MaxEncodedLen
	for _, dt := range codedTypes {
		for _, n := range []int{1, 100, 20000, 70000} {
			src := randomBytes(n*dt.Size(), 11)
			for _, k := range allKinds {
				var e Encoder
				f, err := e.Encode(nil, src, dt, k)
				if err != nil {
					t.Fatal(err)
				}
				if len(f) > MaxEncodedLen(len(src), dt) {
					t.Fatalf("%v/%v n=%d: %d > %d", dt, k, n, len(f), MaxEncodedLen(len(src), dt))
				}
				// the raw frame overhead is header + index + padding only
				over := len(f) - len(src)
				if over > HeaderLen+Align+Align+IndexEntry*(n>>16) {
					t.Fatalf("%v/%v n=%d: overhead %d", dt, k, n, over)
				}
			}
		}
	}
}

func TestHuffSampledAdversary(t *testing.T) {
	// the table comes from every 4th symbol: make those narrow and put
	// unseen exponents everywhere else, in the first block and later ones.
	n := 3 << 16
	src := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		var v uint16
		switch {
		case i%4 == 0:
			v = uint16(120+i%3)<<7 | uint16(i&0x7f)
		case i%5 == 1:
			v = uint16(i*37%256)<<7 | uint16(i&0x807f)
		default:
			v = 121 << 7
		}
		src[2*i], src[2*i+1] = byte(v), byte(v>>8)
	}
	for _, k := range []Kind{Huff, Zip3} {
		roundTrip(t, src, dtype.BFloat16, k)
	}
	// a first block of narrow exponents, then blocks of wide ones
	src2 := gauss(dtype.BFloat16, n, 1e-3, 1)
	copy(src2, constant(dtype.BFloat16, 1<<16, 0.5))
	roundTrip(t, src2, dtype.BFloat16, Huff)
}

func TestLarge(t *testing.T) {
	n := 3 << 20 // 6 MiB of bf16
	if testing.Short() {
		n = 1 << 20
	}
	for _, k := range []Kind{Zip3, Huff} {
		roundTrip(t, gauss(dtype.BFloat16, n, 0.02, 5), dtype.BFloat16, k)
	}
}

// TestStreamedDecode decodes with the non-temporal output path on (the
// threshold lowered so a small tensor takes it), into aligned and
// unaligned outputs.
func TestStreamedDecode(t *testing.T) {
	defer func(m int) { decStreamMin = m }(decStreamMin)
	decStreamMin = 1 << 16
	src := gauss(dtype.BFloat16, 5*16384+100, 0.02, 12)
	var e Encoder
	frame, err := e.Encode(nil, src, dtype.BFloat16, Zip3)
	if err != nil || e.Kind() != Zip3 {
		t.Fatalf("%v %v", err, e.Kind())
	}
	var d Decoder
	for _, off := range []int{0, 1, 64} {
		out := make([]byte, len(src)+off)[off:]
		if _, err := d.Decode(out, frame); err != nil || !bytes.Equal(out, src) {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
}

// TestStreamedEncode encodes with the non-temporal R8 stores on (the
// threshold lowered so a small tensor takes them), into outputs at
// several offsets from a cache line: the frames must be the cached path's.
func TestStreamedEncode(t *testing.T) {
	src := gauss(dtype.BFloat16, 5*16384+100, 0.02, 13)
	var e Encoder
	ref, err := e.Encode(nil, src, dtype.BFloat16, Zip3)
	if err != nil || e.Kind() != Zip3 {
		t.Fatalf("%v %v", err, e.Kind())
	}
	defer func(m int) { encStreamMin = m }(encStreamMin)
	encStreamMin = 1 << 16
	for _, off := range []int{0, 1, 32, 63} {
		frame, err := e.Encode(make([]byte, off, off+len(ref)), src, dtype.BFloat16, Zip3)
		if err != nil || !bytes.Equal(frame[off:], ref) {
			t.Fatalf("offset %d: %v", off, err)
		}
	}
}

func TestHuge(t *testing.T) {
	if testing.Short() {
		t.Skip("> 4 GiB round trip skipped in -short mode")
	}
	if os.Getenv("ZIPCCL_HUGE") == "" {
		t.Skip("set ZIPCCL_HUGE=1 to run the > 4 GiB round trip (needs ~14 GiB of memory; not under -race)")
	}
	n := (1<<32)/2 + 1<<20 // > 4 GiB of bf16
	src := make([]byte, 2*n)
	pat := gauss(dtype.BFloat16, 1<<20, 0.02, 9)
	for i := 0; i < len(src); i += len(pat) {
		copy(src[i:], pat)
	}
	var e Encoder
	frame, err := e.Encode(nil, src, dtype.BFloat16, Zip3)
	if err != nil {
		t.Fatal(err)
	}
	h, err := PeekHeader(frame)
	if err != nil || h.RawLen != len(src) || h.FrameLen != len(frame) {
		t.Fatalf("%+v %v", h, err)
	}
	out := make([]byte, len(src))
	var d Decoder
	if _, err := d.Decode(out, frame); err != nil || !bytes.Equal(out, src) {
		t.Fatalf("huge round trip: %v", err)
	}
}

func Test64BitLengths(t *testing.T) {
	n := 3 << 32 // 12 Gi elements
	sl := StaticLen(n, dtype.BFloat16, Zip3)
	if sl <= 0 || sl < n {
		t.Fatalf("StaticLen(%d) = %d", n, sl)
	}
	if m := MaxEncodedLen(4*n, dtype.Float32); m < 4*n {
		t.Fatalf("MaxEncodedLen = %d", m)
	}
	// a header claiming a huge tensor parses and reports the right lengths
	p := mustPlan(n, dtype.BFloat16, Huff)
	hdr := make([]byte, HeaderLen)
	putHeader(hdr, &p, 128)
	h, err := PeekHeader(hdr)
	if err != nil || h.RawLen != 2*n || h.FrameLen != HeaderLen+p.staticLen+128 {
		t.Fatalf("%+v %v", h, err)
	}
	var d Decoder
	if _, err := d.Decode(make([]byte, 0), hdr); !errors.Is(err, ErrSize) {
		t.Fatalf("got %v", err)
	}
	if StaticLen(-1, dtype.BFloat16, Zip3) != -1 || StaticLen(1, dtype.BFloat16, Auto) != -1 || StaticLen(maxNumel+1, dtype.BFloat16, Raw) != -1 {
		t.Fatal("StaticLen accepted bad input")
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range allKinds {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Fatalf("%v: %v %v", k, got, err)
		}
	}
	if _, err := ParseKind("lz4"); !errors.Is(err, ErrKind) {
		t.Fatal(err)
	}
}

func TestBadArgs(t *testing.T) {
	var e Encoder
	if _, err := e.Encode(nil, make([]byte, 3), dtype.BFloat16, Zip3); !errors.Is(err, ErrSize) {
		t.Fatal(err)
	}
	if _, err := e.Encode(nil, make([]byte, 4), dtype.DType(99), Zip3); !errors.Is(err, ErrDType) {
		t.Fatal(err)
	}
	if _, err := e.Encode(nil, make([]byte, 4), dtype.BFloat16, Kind(7)); !errors.Is(err, ErrKind) {
		t.Fatal(err)
	}
	if _, err := e.EncodeDynamic(nil); !errors.Is(err, ErrState) {
		t.Fatal(err)
	}
	var d Decoder
	if err := d.DecodeSplit(make([]byte, 4), nil, nil, dtype.BFloat16, Zip3); !errors.Is(err, ErrSize) {
		t.Fatal(err)
	}
}

func TestSplitEitherOrder(t *testing.T) {
	// the receiver gets the parts in any order and only decodes with both
	src := gauss(dtype.BFloat16, 50000, 0.5, 4)
	for _, k := range []Kind{Zip3, Huff, Raw} {
		var e Encoder
		st, _ := e.EncodeStatic(nil, src, dtype.BFloat16, k)
		dyn, _ := e.EncodeDynamic(nil)
		parts := map[string][]byte{}
		parts["dynamic"] = append([]byte{}, dyn...)
		parts["static"] = append([]byte{}, st...)
		out := make([]byte, len(src))
		var d Decoder
		if err := d.DecodeSplit(out, parts["static"], parts["dynamic"], dtype.BFloat16, k); err != nil || !bytes.Equal(out, src) {
			t.Fatalf("%v: %v", k, err)
		}
		// the parts swapped or missing are rejected
		if k != Raw {
			if err := d.DecodeSplit(out, st, nil, dtype.BFloat16, k); err == nil {
				t.Fatalf("%v: missing dynamic part accepted", k)
			}
		}
	}
}

func TestTensor(t *testing.T) {
	src := gauss(dtype.BFloat16, 6*7*11, 1, 1)
	shape := []int64{6, 7, 11}
	for _, k := range allKinds {
		c, err := EncodeTensor(nil, src, dtype.BFloat16, shape, k)
		if err != nil {
			t.Fatal(err)
		}
		dt, sh, raw, err := DecodeTensorHeader(c)
		if err != nil || dt != dtype.BFloat16 || fmt.Sprint(sh) != fmt.Sprint(shape) || raw != len(src) {
			t.Fatalf("%v %v %v %v", dt, sh, raw, err)
		}
		out := make([]byte, raw)
		if err := DecodeTensor(out, c); err != nil || !bytes.Equal(out, src) {
			t.Fatalf("%v: %v", k, err)
		}
		for i := 0; i < len(c); i += 1 + len(c)/200 {
			bad := append([]byte{}, c...)
			bad[i] ^= 0x10
			if err := DecodeTensor(out, bad); err == nil {
				t.Fatalf("%v: corruption at %d accepted", k, i)
			}
		}
		if err := DecodeTensor(out, c[:len(c)-1]); err == nil {
			t.Fatal("truncated container accepted")
		}
	}
	if _, err := EncodeTensor(nil, src, dtype.BFloat16, []int64{5, 5}, Zip3); !errors.Is(err, ErrSize) {
		t.Fatal(err)
	}
	// scalar: zero dims, one element
	c, err := EncodeTensor(nil, src[:2], dtype.BFloat16, nil, Auto)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 2)
	if err := DecodeTensor(out, c); err != nil || !bytes.Equal(out, src[:2]) {
		t.Fatal(err)
	}
}

func TestCorruptionRejected(t *testing.T) {
	n := 20000
	cases := []struct {
		dt  dtype.DType
		k   Kind
		src []byte
	}{
		{dtype.BFloat16, Zip3, gauss(dtype.BFloat16, n, 0.02, 1)},
		{dtype.BFloat16, Huff, gauss(dtype.BFloat16, n, 0.02, 1)},
		{dtype.Float32, Zip3, gauss(dtype.Float32, n/4, 3, 1)},
		{dtype.Float32, Huff, gauss(dtype.Float32, n/4, 3, 1)},
		{dtype.Float16, Zip3, gauss(dtype.Float16, n, 0.1, 1)},
		{dtype.Float16, Huff, gauss(dtype.Float16, n, 0.1, 1)},
		{dtype.Float8E4M3FN, Huff, gauss(dtype.Float8E4M3FN, n, 1, 1)},
		{dtype.Float8E5M2, Zip3, gauss(dtype.Float8E5M2, n, 1, 1)},
		{dtype.BFloat16, Raw, gauss(dtype.BFloat16, 777, 1, 1)},
		{dtype.BFloat16, Huff2Packed, gauss(dtype.BFloat16, 3*n+5, 0.02, 1)},
		{dtype.Float16, Huff2Packed, specials(dtype.Float16, n, 1)},
		{dtype.Float32, Huff2Packed, fp16Valued(n, 1)},
		{dtype.Float8E5M2, Huff2Packed, gauss(dtype.Float8E5M2, n, 1, 1)},
	}
	for _, c := range cases {
		var e Encoder
		frame, err := e.Encode(nil, c.src, c.dt, c.k)
		if err != nil {
			t.Fatal(err)
		}
		var d Decoder
		out := make([]byte, len(c.src))
		step := 1 + len(frame)/500
		for i := 0; i < len(frame); i += step {
			for _, x := range []byte{0x01, 0xff} {
				bad := append([]byte{}, frame...)
				bad[i] ^= x
				if _, err := d.Decode(out, bad); err == nil {
					t.Fatalf("%v/%v: flip %#x at %d of %d accepted", c.dt, c.k, x, i, len(frame))
				}
			}
		}
		for _, cut := range []int{0, 1, HeaderLen - 1, HeaderLen, HeaderLen + 1, len(frame) / 2, len(frame) - 1} {
			if _, err := d.Decode(out, frame[:cut]); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%v/%v: cut at %d: %v", c.dt, c.k, cut, err)
			}
		}
		// still decodes after all that
		if _, err := d.Decode(out, frame); err != nil || !bytes.Equal(out, c.src) {
			t.Fatal(err)
		}
	}
}

func TestSpecialValuesExact(t *testing.T) {
	// NaN payloads survive bit for bit
	src := fromF64(dtype.Float32, []float64{math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 5e-324})
	src = append(src, 0x01, 0x00, 0x80, 0x7f, 0xff, 0xff, 0xff, 0xff)
	for _, k := range allKinds {
		roundTrip(t, src, dtype.Float32, k)
	}
}

// TestNoAllocs: with reused buffers, Encode and Decode do not allocate.
func TestNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16} {
		src := gauss(dt, 100000, 0.02, 1)
		for _, k := range []Kind{Zip3, Huff, Raw} {
			var e Encoder
			var d Decoder
			frame, _ := e.Encode(nil, src, dt, k)
			buf := make([]byte, 0, 2*len(frame)+(1<<20))
			out := make([]byte, len(src))
			buf, _ = e.Encode(buf[:0], src, dt, k)
			d.Decode(out, frame)
			if a := testing.AllocsPerRun(5, func() { buf, _ = e.Encode(buf[:0], src, dt, k) }); a != 0 {
				t.Errorf("%v/%v: Encode allocates %v times", dt, k, a)
			}
			if a := testing.AllocsPerRun(5, func() { d.Decode(out, frame) }); a != 0 {
				t.Errorf("%v/%v: Decode allocates %v times", dt, k, a)
			}
		}
	}
}
