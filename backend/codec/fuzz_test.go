package codec

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/zipccl/zipccl/backend/codec/internal/fuzzseed"
	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// maxFuzzRaw bounds the decode buffers the fuzzers allocate.
const maxFuzzRaw = 1 << 22

// seedFrames returns small valid frames of every kind and coded dtype.
func seedFrames() [][]byte {
	var out [][]byte
	var e Encoder
	for _, dt := range append(codedTypes, dtype.Int32) {
		for _, k := range []Kind{Raw, Zip3, Huff} {
			for _, n := range []int{0, 1, 40, 300} {
				src := randomBytes(4*n, 1)
				if dt != dtype.Int32 {
					src = gauss(dt, n, 0.5, uint64(n))
				}
				f, _ := e.Encode(nil, src, dt, k)
				out = append(out, f)
			}
		}
	}
	// huff2 last, so that the older seeds keep their file names
	for _, dt := range codedTypes {
		for _, n := range []int{1, 300} {
			f, _ := e.Encode(nil, gauss(dt, n, 0.5, uint64(n)), dt, Huff2)
			out = append(out, f)
		}
	}
	f, _ := e.Encode(nil, fp16Valued(3000, 1), dtype.Float32, Huff2) // coded residue planes
	out = append(out, f)
	// then packed huff2
	for _, dt := range codedTypes {
		f, _ := e.Encode(nil, gauss(dt, 300, 0.5, 300), dt, Huff2Packed)
		out = append(out, f)
	}
	f, _ = e.Encode(nil, fp16Valued(70000, 1), dtype.Float32, Huff2Packed) // two blocks
	return append(out, f)
}

// decodeBoth decodes with the active kernels and with the portable ones and
// requires the same verdict and output.
func decodeBoth(t *testing.T, data []byte) {
	h, err := PeekHeader(data)
	if err != nil || h.RawLen > maxFuzzRaw {
		return
	}
	var d Decoder
	out1 := make([]byte, h.RawLen)
	n1, err1 := d.Decode(out1, data)
	restore := zip3.UsePortable()
	useSplitKernels("go")
	out2 := make([]byte, h.RawLen)
	n2, err2 := d.Decode(out2, data)
	restore()
	useSplitKernels(bestSplit())
	if (err1 == nil) != (err2 == nil) || n1 != n2 {
		t.Fatalf("kernels disagree: %v vs %v", err1, err2)
	}
	out4 := make([]byte, h.RawLen)
	n4, err4 := DecodeThreads(out4, data, 3)
	if (err1 == nil) != (err4 == nil) || n1 != n4 || (err1 == nil && !bytes.Equal(out1, out4)) {
		t.Fatalf("one thread and three disagree: %v vs %v", err1, err4)
	}
	if err1 == nil {
		if !bytes.Equal(out1, out2) {
			t.Fatal("kernels decode differently")
		}
		// a frame that decodes is canonical: encoding the output with the
		// same kind gives a frame of the same length that decodes the same
		var e Encoder
		f2, err := e.Encode(nil, out1, h.DType, h.Kind)
		if err != nil {
			t.Fatal(err)
		}
		out3 := make([]byte, h.RawLen)
		if _, err := d.Decode(out3, f2); err != nil || !bytes.Equal(out3, out1) {
			t.Fatalf("re-encoded frame does not round trip: %v", err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range seedFrames() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeBoth(t, data)
	})
}

func FuzzDecodeSplit(f *testing.F) {
	var e Encoder
	for _, dt := range codedTypes {
		for _, k := range []Kind{Raw, Zip3, Huff, Huff2} {
			src := gauss(dt, 100, 1, 1)
			st, _ := e.EncodeStatic(nil, src, dt, k)
			dyn, _ := e.EncodeDynamic(nil)
			f.Add(st, dyn, uint8(dt), uint8(k), uint16(100))
		}
	}
	f.Fuzz(func(t *testing.T, st, dyn []byte, dtb, kb uint8, numel uint16) {
		dt := dtype.DType(dtb)
		if !dt.Valid() {
			return
		}
		out := make([]byte, int(numel)*dt.Size())
		var d Decoder
		err := d.DecodeSplit(out, st, dyn, dt, Kind(kb))
		if err == nil {
			// the same bytes framed must decode identically
			p := mustPlan(int(numel), dt, Kind(kb))
			frame := make([]byte, HeaderLen, HeaderLen+len(st)+len(dyn))
			putHeader(frame, &p, len(dyn))
			frame = append(append(frame, st...), dyn...)
			out2 := make([]byte, len(out))
			if _, err := d.Decode(out2, frame); err != nil || !bytes.Equal(out, out2) {
				t.Fatalf("split decodes but frame does not: %v", err)
			}
		}
	})
}

func FuzzDecodeTensor(f *testing.F) {
	for _, k := range []Kind{Raw, Zip3, Huff, Huff2, Huff2Packed} {
		c, _ := EncodeTensor(nil, gauss(dtype.BFloat16, 60, 1, 1), dtype.BFloat16, []int64{3, 4, 5}, k)
		f.Add(c)
	}
	c, _ := EncodeTensor(nil, nil, dtype.Float32, []int64{0, 7}, Auto)
	f.Add(c)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, shape, raw, err := DecodeTensorHeader(data)
		if err != nil || raw > maxFuzzRaw {
			return
		}
		if n, ok := numelOf(shape); !ok || n < 0 {
			t.Fatal("header accepted a bad shape")
		}
		out := make([]byte, raw)
		_ = DecodeTensor(out, data)
	})
}

// FuzzRoundTrip encodes arbitrary bytes as every dtype and kind and checks
// the frame bound, the split parts and the decoded bytes.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{}, uint8(dtype.BFloat16), uint8(Zip3))
	f.Add(gauss(dtype.BFloat16, 200, 1e-3, 1), uint8(dtype.BFloat16), uint8(Huff))
	f.Add(specials(dtype.Float32, 100, 1), uint8(dtype.Float32), uint8(Auto))
	f.Add(gauss(dtype.Float16, 300, 1, 1), uint8(dtype.Float16), uint8(Zip3))
	f.Add(gauss(dtype.Float8E4M3FN, 300, 1, 1), uint8(dtype.Float8E4M3FN), uint8(Huff))
	f.Add(fp16Valued(300, 1), uint8(dtype.Float32), uint8(Huff2))
	f.Add(gauss(dtype.BFloat16, 300, 1e-3, 1), uint8(dtype.BFloat16), uint8(Huff2Packed))
	f.Fuzz(func(t *testing.T, data []byte, dtb, kb uint8) {
		dt := dtype.DType(dtb%12 + 1)
		k := Kind(kb) // the kinds' own codes; other bytes map onto them
		if k != Raw && k != Zip3 && k != Huff && k != Huff2 && k != Huff2Packed && k != Auto {
			k = []Kind{Raw, Zip3, Huff, Huff2, Huff2Packed, Auto}[kb%6]
		}
		data = data[:len(data)/dt.Size()*dt.Size()]
		roundTrip(t, data, dt, k)
	})
}

// TestWriteSeedCorpus regenerates testdata/fuzz seed files for the fuzzers
// of this package (ZIPCCL_WRITE_CORPUS=1 go test -run WriteSeedCorpus).
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_CORPUS") == "" {
		t.Skip("set ZIPCCL_WRITE_CORPUS=1")
	}
	for i, s := range seedFrames() {
		writeSeed(t, "FuzzDecode", fmt.Sprintf("frame%02d", i), s)
		if len(s) > HeaderLen+8 {
			bad := append([]byte{}, s...)
			bad[len(bad)/2] ^= 0x40
			writeSeed(t, "FuzzDecode", fmt.Sprintf("flip%02d", i), bad)
			writeSeed(t, "FuzzDecode", fmt.Sprintf("cut%02d", i), s[:len(s)-len(s)/3])
		}
	}
	c, _ := EncodeTensor(nil, gauss(dtype.BFloat16, 60, 1, 1), dtype.BFloat16, []int64{3, 4, 5}, Zip3)
	writeSeed(t, "FuzzDecodeTensor", "zip3", c)
	c, _ = EncodeTensor(nil, gauss(dtype.Float16, 24, 1, 1), dtype.Float16, []int64{24}, Huff)
	writeSeed(t, "FuzzDecodeTensor", "huff", c)
	c, _ = EncodeTensor(nil, gauss(dtype.Float32, 300, 1, 1), dtype.Float32, []int64{300}, Huff2)
	writeSeed(t, "FuzzDecodeTensor", "huff2", c)
	c, _ = EncodeTensor(nil, gauss(dtype.BFloat16, 70000, 1e-3, 1), dtype.BFloat16, []int64{70000}, Huff2Packed)
	writeSeed(t, "FuzzDecodeTensor", "huff2p", c)
	var e Encoder
	for _, k := range []Kind{Zip3, Huff, Huff2} {
		src := gauss(dtype.BFloat16, 100, 1, 1)
		st, _ := e.EncodeStatic(nil, src, dtype.BFloat16, k)
		dyn, _ := e.EncodeDynamic(nil)
		writeSeedArgs(t, "FuzzDecodeSplit", "bf16-"+k.String(), st, dyn, uint8(dtype.BFloat16), uint8(k), uint16(100))
	}
	writeSeedArgs(t, "FuzzRoundTrip", "bf16", gauss(dtype.BFloat16, 100, 0.1, 1), uint8(dtype.BFloat16), uint8(Zip3))
	writeSeedArgs(t, "FuzzRoundTrip", "special", specials(dtype.Float32, 50, 1), uint8(dtype.Float32), uint8(Huff))
	writeSeedArgs(t, "FuzzRoundTrip", "special-huff2", specials(dtype.Float16, 50, 1), uint8(dtype.Float16), uint8(Huff2))
	writeSeedArgs(t, "FuzzRoundTrip", "f16in32-huff2", fp16Valued(200, 2), uint8(dtype.Float32), uint8(Huff2))
	writeSeedArgs(t, "FuzzRoundTrip", "special-huff2p", specials(dtype.BFloat16, 70, 1), uint8(dtype.BFloat16), uint8(Huff2Packed))
}

func writeSeed(t *testing.T, fuzzer, name string, data []byte) {
	writeSeedArgs(t, fuzzer, name, data)
}

func writeSeedArgs(t *testing.T, fuzzer, name string, args ...any) {
	t.Helper()
	if err := fuzzseed.Write(fuzzer, name, args...); err != nil {
		t.Fatal(err)
	}
}
