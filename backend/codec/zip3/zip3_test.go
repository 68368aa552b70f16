package zip3

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
)

func gaussBF16(n int, sigma float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		v := math.Float32bits(float32(r.NormFloat64() * sigma))
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v>>16))
	}
	return b
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func roundTrip(t *testing.T, f Format, src []byte) (int, int) {
	t.Helper()
	var e Encoder
	var d Decoder
	n := len(src) / f.ElemSize()
	w := ChooseWindow(f, src, n)
	st := make([]byte, StaticLen(f, n))
	for i := range st {
		st[i] = 0xAA // encoder must overwrite everything
	}
	esc, cnt, crc := e.EncodeBlock(st, nil, src, f, w)
	if cnt != len(esc) || crc != crc32c.Checksum(src) {
		t.Fatalf("count %d len %d crc %x", cnt, len(esc), crc)
	}
	out := make([]byte, len(src))
	if c, err := d.DecodeBlock(out, st, esc, f, w); err != nil || c != crc {
		t.Fatalf("%v n=%d: %v (crc %x want %x)", f, n, err, c, crc)
	}
	if !bytes.Equal(out, src) {
		t.Fatalf("%v n=%d: mismatch", f, n)
	}
	return len(st), cnt
}

func TestRoundTripAll(t *testing.T) {
	for _, f := range []Format{BF16, FP32, FP16, E5M2, E4M3} {
		for _, n := range []int{1, 2, 31, 32, 33, 127, 128, 129, 1000, 4096, 16384} {
			roundTrip(t, f, randBytes(n*f.ElemSize(), uint64(n)))
		}
	}
	for _, sigma := range []float64{1e-4, 0.02, 1, 1e3} {
		st, cnt := roundTrip(t, BF16, gaussBF16(16384, sigma, 7))
		ratio := 32768.0 / float64(st+cnt)
		t.Logf("sigma %g: escapes %d (%.2f%%) ratio %.4f", sigma, cnt, 100*float64(cnt)/16384, ratio)
		if ratio < 1.42 {
			t.Errorf("ratio %.4f", ratio)
		}
	}
}

func zeroHeavy(n int, seed uint64) []byte {
	b := gaussBF16(n, 0.01, seed)
	for i := 0; i < n; i += 3 {
		b[2*i], b[2*i+1] = 0, 0
	}
	return b
}

// TestPortableMatchesKernel checks that the active (SIMD) kernels and the
// portable ones produce the same bytes and decode each other's output.
func TestPortableMatchesKernel(t *testing.T) {
	t.Logf("kernel: %s", KernelName)
	inputs := [][]byte{
		gaussBF16(16384, 0.3, 3), gaussBF16(16384+77, 1e-3, 4), gaussBF16(100, 5, 5),
		zeroHeavy(16384, 6), zeroHeavy(4000, 7), randBytes(2*16384, 8), randBytes(2*333, 9),
		make([]byte, 2*16384),
	}
	for ii, src := range inputs {
		w := ChooseWindow(BF16, src, len(src)/2)
		st1, esc1, crc1 := encodeEachKernel(t, src, w)
		if crc1 != crc32c.Checksum(src) {
			t.Fatalf("input %d: wrong CRC", ii)
		}
		for _, kn := range Kernels() {
			portable := kn
			restore := UseKernel(kn)
			var d Decoder
			out := make([]byte, len(src))
			if c, err := d.DecodeBlock(out, st1, esc1, BF16, w); err != nil || !bytes.Equal(out, src) || c != crc1 {
				t.Fatalf("input %d kernel=%s: %v", ii, portable, err)
			}
			// missing, extra and non-canonical escapes are rejected
			if len(esc1) > 0 {
				if _, err := d.DecodeBlock(out, st1, esc1[:len(esc1)-1], BF16, w); err == nil {
					t.Fatalf("input %d kernel=%s: short escape list accepted", ii, portable)
				}
				bad := append([]byte{}, esc1...)
				bad[len(bad)/2] = w.Base + 1
				if _, err := d.DecodeBlock(out, st1, bad, BF16, w); err == nil {
					t.Fatalf("input %d kernel=%s: non-canonical escape accepted", ii, portable)
				}
			}
			if _, err := d.DecodeBlock(out, st1, append(append([]byte{}, esc1...), 200), BF16, w); err == nil {
				t.Fatalf("input %d kernel=%s: extra escape accepted", ii, portable)
			}
			restore()
		}
	}
}

// TestKernelsEveryWindow checks each SIMD encoder against the portable one
// for every valid window, in both modes, on data that has every exponent
// field, so that each table entry is used.
func TestKernelsEveryWindow(t *testing.T) {
	src := randBytes(2*4096, 11)
	for i := 0; i < 512; i += 5 {
		src[2*i], src[2*i+1] = 0, byte(i)&0x80 // zero fields, for zero mode
	}
	for _, mode := range []uint8{ModePlain, ModeZero} {
		for base := 0; base < 256; base++ {
			if w := (Window{Mode: mode, Base: uint8(base)}); w.Valid(BF16) {
				encodeEachKernel(t, src, w)
			}
		}
	}
}

// encodeEachKernel encodes the bf16 block src with window w by the portable
// encoder and by every kernel set, cached and streamed (into an output 17
// bytes past a line), fails the test where a kernel's bytes or CRC differ,
// and returns the portable encoder's output.
func encodeEachKernel(t *testing.T, src []byte, w Window) (st, esc []byte, crc uint32) {
	t.Helper()
	n := len(src) / 2
	var e Encoder
	restore := UsePortable()
	st = make([]byte, StaticLen(BF16, n))
	esc, _, crc = e.EncodeBlock(st, nil, src, BF16, w)
	restore()
	for _, kn := range Kernels() {
		restore := UseKernel(kn)
		for _, stream := range []bool{false, true} {
			e := Encoder{Stream: stream}
			buf := make([]byte, len(st)+128)
			off := 17 + int(-uintptr(unsafe.Pointer(&buf[0]))%64)
			st2 := buf[off : off+len(st)]
			esc2, _, crc2 := e.EncodeBlock(st2, nil, src, BF16, w)
			if !bytes.Equal(st, st2) || !bytes.Equal(esc, esc2) || crc != crc2 {
				t.Fatalf("n=%d window %+v: kernel %s (stream %v) output differs from portable", n, w, kn, stream)
			}
		}
		restore()
	}
	return st, esc, crc
}

// TestMemHints checks that the memory hints (Ahead prefetches, Stream's
// non-temporal stores, on aligned and unaligned outputs) change no byte.
func TestMemHints(t *testing.T) {
	const n = 16384 + 96 // pairs, an odd group and a partial group
	src := gaussBF16(3*n, 0.05, 11)
	w := ChooseWindow(BF16, src[:2*n], n)
	var e Encoder
	ref := make([]byte, StaticLen(BF16, n))
	refEsc, _, refCRC := e.EncodeBlock(ref, nil, src[:2*n], BF16, w)
	for _, kn := range Kernels() {
		restore := UseKernel(kn)
		for _, ahead := range []int{0, 2 * n, 4 * n, -64} { // -64: a line this block has read already
			e := Encoder{Ahead: ahead}
			st := make([]byte, len(ref))
			esc, _, crc := e.EncodeBlock(st, nil, src[:2*n], BF16, w)
			if !bytes.Equal(st, ref) || !bytes.Equal(esc, refEsc) || crc != refCRC {
				t.Fatalf("kernel %s ahead %d: encoder output differs", kn, ahead)
			}
			// streamed R8 stores at every offset from a line, each
			// output between guard bytes that must stay untouched
			for off := 0; off < 64; off++ {
				e := Encoder{Ahead: ahead, Stream: true}
				buf := make([]byte, len(ref)+256)
				for i := range buf {
					buf[i] = 0xa5
				}
				start := 64 + off + int(-uintptr(unsafe.Pointer(&buf[0]))%64)
				out := buf[start : start+len(ref)]
				esc, _, crc := e.EncodeBlock(out, nil, src[:2*n], BF16, w)
				if !bytes.Equal(out, ref) || !bytes.Equal(esc, refEsc) || crc != refCRC {
					t.Fatalf("kernel %s ahead %d stream offset %d: encoder output differs", kn, ahead, off)
				}
				for i, b := range buf {
					if (i < start || i >= start+len(ref)) && b != 0xa5 {
						t.Fatalf("kernel %s stream offset %d: byte %d outside the output written", kn, off, i-start)
					}
				}
			}
			for _, stream := range []bool{false, true} {
				for _, off := range []int{0, 1, 64} {
					d := Decoder{Stream: stream, Ahead: ahead}
					buf := make([]byte, 2*n+off)
					out := buf[off:]
					c, err := d.DecodeBlock(out, st, esc, BF16, w)
					if err != nil || c != refCRC || !bytes.Equal(out, src[:2*n]) {
						t.Fatalf("kernel %s ahead %d stream %v offset %d: %v", kn, ahead, stream, off, err)
					}
				}
			}
		}
		restore()
	}
}

// TestHalvesEveryKernel checks each kernel set's float32 half split and
// join against the portable ones, at lengths around the SIMD step (32
// floats) and at unaligned offsets, and that join undoes split.
func TestHalvesEveryKernel(t *testing.T) {
	for _, kn := range Kernels() {
		restore := UseKernel(kn)
		for _, n := range []int{0, 1, 2, 31, 32, 33, 63, 64, 65, 100, 1000, 16384 + 17} {
			for _, off := range []int{0, 3} {
				src := randBytes(4*n+off, uint64(n))[off:]
				wantHi, wantLo := make([]byte, 2*n), make([]byte, 2*n)
				splitHalvesGo(wantHi, wantLo, src, 0)
				hi, lo := make([]byte, 2*n), make([]byte, 2*n)
				for _, pf := range []int{4 * n, -64} { // prefetch hints change no byte
					active.split(hi, lo, src, pf)
					if !bytes.Equal(hi, wantHi) || !bytes.Equal(lo, wantLo) {
						t.Fatalf("kernel %s n=%d off=%d pf=%d: split differs from portable", kn, n, off, pf)
					}
				}
				SplitHalves(hi, lo, src)
				dst := make([]byte, 4*n+off)[off:]
				JoinHalves(dst, hi, lo)
				if !bytes.Equal(dst, src) {
					t.Fatalf("kernel %s n=%d off=%d: join does not undo split", kn, n, off)
				}
			}
		}
		restore()
	}
}

// TestFP16EveryKernel checks each kernel set's float16 recasting (pseudo
// words and residue planes) against the portable one, that the way back
// restores every bit, and that a field above 31 is reported wherever it is.
func TestFP16EveryKernel(t *testing.T) {
	for _, kn := range Kernels() {
		restore := UseKernel(kn)
		for _, n := range []int{0, 1, 31, 32, 33, 64, 100, 16384 + 17} {
			src := randBytes(2*n, uint64(n)+7)
			plen := (n + 63) / 64 * 8
			y, planes := make([]byte, 2*n), make([]byte, 3*plen)
			wantY, wantPlanes := make([]byte, 2*n), make([]byte, 3*plen)
			fp16ToPseudoGo(wantY, wantPlanes, plen, src, 0)
			for _, pf := range []int{2 * n, -64} { // prefetch hints change no byte
				active.toPseudo16(y, planes, plen, src, pf)
				if !bytes.Equal(y, wantY) || !bytes.Equal(planes, wantPlanes) {
					t.Fatalf("kernel %s n=%d pf=%d: pseudo words or planes differ from portable", kn, n, pf)
				}
			}
			dst := make([]byte, 2*n)
			if err := active.fromPseudo16(dst, y, planes, plen); err != nil || !bytes.Equal(dst, src) {
				t.Fatalf("kernel %s n=%d: the way back: %v", kn, n, err)
			}
			for _, i := range []int{0, n / 2, n - 1} {
				if n == 0 {
					break
				}
				bad := bytes.Clone(y)
				bad[2*i+1] |= 0x10 // field bit 5
				if err := active.fromPseudo16(dst, bad, planes, plen); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("kernel %s n=%d: field 32+ at %d not reported: %v", kn, n, i, err)
				}
			}
		}
		restore()
	}
}

// TestSampleEveryKernel checks each kernel set's sums of a full bf16
// block's window sample against a loop over SamplePos: on random bytes,
// and with the sampled elements' fields set to 0, 1, 254 and 255 in turn.
func TestSampleEveryKernel(t *testing.T) {
	// the SIMD gathers read 4 bytes at each sampled element
	for _, p := range fullPos {
		if p > fullN-2 {
			t.Fatalf("sample at %d: a 4-byte read there leaves the block", p)
		}
	}
	want := func(b []byte) (sum uint64, nz, zc int) {
		for k := 0; k < SampleSize; k++ {
			i := SamplePos(k, fullN)
			m := uint32(binary.LittleEndian.Uint16(b[2*i:])) & 0x7fff
			if f := m >> 7; f == 0 {
				zc++
			} else if f != 255 {
				sum += uint64(m)
				nz++
			}
		}
		return
	}
	for _, kn := range Kernels() {
		restore := UseKernel(kn)
		for seed := uint64(0); seed < 8; seed++ {
			b := randBytes(2*fullN, seed)
			if seed > 0 {
				for k, i := range fullPos {
					f := []uint16{0, 1, 254, 255, uint16(seed)}[(k+int(seed))%5]
					v := binary.LittleEndian.Uint16(b[2*i:])
					binary.LittleEndian.PutUint16(b[2*i:], v&0x807f|f<<7)
				}
			}
			s, nz, zc := active.sample((*[2 * fullN]byte)(b))
			ws, wnz, wzc := want(b)
			if s != ws || nz != wnz || zc != wzc {
				t.Fatalf("kernel %s seed %d: sample sums (%d, %d, %d), want (%d, %d, %d)", kn, seed, s, nz, zc, ws, wnz, wzc)
			}
		}
		restore()
	}
}

// TestEscapesPerStep encodes and decodes, with every kernel set, a block
// whose SIMD steps (64 elements) hold every number of escapes from 0 to 64:
// the encoders store a step's escapes one way up to 16 and another above.
func TestEscapesPerStep(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, w := range []Window{{Mode: ModePlain, Base: 120}, {Mode: ModeZero, Base: 120}} {
		src := make([]byte, 2*fullN)
		for i := 0; i < fullN; i++ {
			field := w.Base + 1 + uint8(i%5) // in the window in both modes
			if i%64 < (i/64)%65 {
				field = w.Base + 40
			}
			binary.LittleEndian.PutUint16(src[2*i:], uint16(field)<<7|uint16(r.Uint32())&0x807f)
		}
		st, esc, crc := encodeEachKernel(t, src, w)
		for _, kn := range Kernels() {
			restore := UseKernel(kn)
			var d Decoder
			out := make([]byte, len(src))
			if c, err := d.DecodeBlock(out, st, esc, BF16, w); err != nil || c != crc || !bytes.Equal(out, src) {
				t.Fatalf("window %+v kernel %s: decode: %v", w, kn, err)
			}
			restore()
		}
	}
}
