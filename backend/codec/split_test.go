package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// TestSplitKernels checks every split/merge kernel set (bf16 and fp16)
// against the portable one, byte for byte, and runs the huff round trip with
// each.
func TestSplitKernels(t *testing.T) {
	defer useSplitKernels(bestSplit())
	for _, n := range []int{0, 1, 31, 32, 63, 64, 65, 1000, 4097} {
		src := randomBytes(2*n, uint64(n))
		useSplitKernels("go")
		r1, s1 := make([]byte, n), make([]byte, n)
		splitBF16(r1, s1, src)
		for _, k := range splitKernels() {
			useSplitKernels(k)
			r2, s2, s3 := make([]byte, n), make([]byte, n), make([]byte, n)
			splitBF16(r2, s2, src)
			symsBF16(s3, src)
			out := make([]byte, 2*n)
			mergeBF16(out, r2, s2)
			if !bytes.Equal(r1, r2) || !bytes.Equal(s1, s2) || !bytes.Equal(s1, s3) || !bytes.Equal(out, src) {
				t.Fatalf("kernel %s n=%d differs", k, n)
			}
			r3, s4 := make([]byte, n), make([]byte, n)
			splitFP16(r3, s4, src)
			clear(out)
			mergeFP16(out, r3, s4)
			r4, s5 := make([]byte, n), make([]byte, n)
			splitFP16Go(r4, s5, src)
			if !bytes.Equal(r3, r4) || !bytes.Equal(s4, s5) || !bytes.Equal(out, src) {
				t.Fatalf("kernel %s n=%d: fp16 split or merge differs", k, n)
			}
			roundTrip(t, gauss(dtype.BFloat16, 3*n+5, 0.1, 1), dtype.BFloat16, Huff)
		}
	}
}

// TestKernelsSameFrames encodes with every zip3 kernel set and every
// split/merge kernel set and requires byte-identical frames that decode
// with every other set.
func TestKernelsSameFrames(t *testing.T) {
	defer useSplitKernels(bestSplit())
	inputs := []struct {
		dt  dtype.DType
		src []byte
	}{
		{dtype.BFloat16, gauss(dtype.BFloat16, 70001, 0.02, 1)},
		{dtype.BFloat16, specials(dtype.BFloat16, 20000, 2)},
		{dtype.Float32, gauss(dtype.Float32, 40001, 3, 3)},
		{dtype.Float16, gauss(dtype.Float16, 30001, 0.5, 4)},
	}
	for _, in := range inputs {
		for _, k := range []Kind{Zip3, Huff} {
			var ref []byte
			for _, zk := range zip3.Kernels() {
				for _, sk := range splitKernels() {
					restore := zip3.UseKernel(zk)
					useSplitKernels(sk)
					var e Encoder
					f, err := e.Encode(nil, in.src, in.dt, k)
					if err != nil {
						t.Fatal(err)
					}
					if ref == nil {
						ref = f
					} else if !bytes.Equal(ref, f) {
						t.Fatalf("%v/%v: kernels %s/%s encode differently", in.dt, k, zk, sk)
					}
					out := make([]byte, len(in.src))
					var d Decoder
					if _, err := d.Decode(out, ref); err != nil || !bytes.Equal(out, in.src) {
						t.Fatalf("%v/%v: kernels %s/%s: %v", in.dt, k, zk, sk, err)
					}
					restore()
				}
			}
		}
	}
}

// TestMergeCRC checks the one-pass merge and checksum of every kernel set (the AVX-512 one folds
// the CRC as it writes, with cached or non-temporal stores) against the
// portable merge and checksum, on aligned and unaligned outputs.
func TestMergeCRC(t *testing.T) {
	defer useSplitKernels(bestSplit())
	for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129, 1000, 4097, 65536} {
		r8, syms := randomBytes(n, uint64(n)+1), randomBytes(n, uint64(n)+2)
		want := make([]byte, 2*n)
		mergeBF16Go(want, r8, syms)
		wantCRC := crc(want)
		for _, k := range splitKernels() {
			useSplitKernels(k)
			for _, off := range []int{0, 1, 32} {
				for _, nt := range []bool{false, true} {
					buf := make([]byte, 2*n+128+8)
					a := 0
					if len(buf) > 0 {
						a = int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
					}
					dst := buf[a+off : a+off+2*n]
					got := mergeBF16CRC(dst, r8, syms, nt)
					if got != wantCRC || !bytes.Equal(dst, want) {
						t.Fatalf("kernel %s n=%d off=%d nt=%v: crc %08x want %08x, bytes equal %v", k, n, off, nt, got, wantCRC, bytes.Equal(dst, want))
					}
					if !allZero(buf[a+off+2*n:]) || !allZero(buf[:a+off]) {
						t.Fatalf("kernel %s n=%d: wrote outside dst", k, n)
					}
				}
			}
		}
		// huff's float16 (R8, symbols) and float32 (R8, R16, symbols)
		lo16, r16 := randomBytes(n, uint64(n)+20), randomBytes(2*n, uint64(n)+21)
		want16, wantW := make([]byte, 2*n), make([]byte, 4*n)
		useSplitKernels("go")
		mergeFP16(want16, lo16, syms)
		var hi []byte
		mergeFP32(wantW, r8, r16, syms, &hi)
		crc16, crcW := crc(want16), crc(wantW)
		for _, k := range splitKernels() {
			useSplitKernels(k)
			for _, nt := range []bool{false, true} {
				buf := make([]byte, 4*n+128+8)
				a := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
				d16 := buf[a : a+2*n]
				if got := mergeFP16CRC(d16, lo16, syms, nt); got != crc16 || !bytes.Equal(d16, want16) {
					t.Fatalf("kernel %s n=%d nt=%v: float16 merge crc %08x want %08x", k, n, nt, got, crc16)
				}
				clear(buf)
				dW := buf[a : a+4*n]
				if got := mergeFP32WCRC(dW, r8, r16, syms, &hi, nt); got != crcW || !bytes.Equal(dW, wantW) {
					t.Fatalf("kernel %s n=%d nt=%v: float32 (R16) merge crc %08x want %08x", k, n, nt, got, crcW)
				}
				if !allZero(buf[a+4*n:]) {
					t.Fatalf("kernel %s n=%d: float32 (R16) wrote past dst", k, n)
				}
			}
		}
		// float32 from four planes: against the element formula of FORMAT.md 4a
		var pl [4][]byte
		for i := range pl {
			pl[i] = randomBytes(n, uint64(n)+10+uint64(i))
		}
		want32 := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			v := uint32(pl[1][i]&0x80)<<24 | uint32(pl[0][i])<<23 | uint32(pl[1][i]&0x7f)<<16 | uint32(pl[2][i])<<8 | uint32(pl[3][i])
			binary.LittleEndian.PutUint32(want32[4*i:], v)
		}
		wantCRC = crc(want32)
		for _, k := range splitKernels() {
			useSplitKernels(k)
			for _, off := range []int{0, 4} {
				for _, nt := range []bool{false, true} {
					buf := make([]byte, 4*n+128+8)
					a := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
					dst := buf[a+off : a+off+4*n]
					got := mergeFP32CRC(dst, &pl, nt)
					if got != wantCRC || !bytes.Equal(dst, want32) {
						t.Fatalf("kernel %s n=%d off=%d nt=%v: float32 crc %08x want %08x, bytes equal %v", k, n, off, nt, got, wantCRC, bytes.Equal(dst, want32))
					}
					if !allZero(buf[a+off+4*n:]) || !allZero(buf[:a+off]) {
						t.Fatalf("kernel %s n=%d: float32 wrote outside dst", k, n)
					}
				}
			}
		}
	}
}

// BenchmarkMergeCRC times each kernel set's merge with its checksum on one
// block of 64 Ki elements (bfloat16's two planes, huff2's four float32
// planes), cached and non-temporal stores, output bytes a second.
func BenchmarkMergeCRC(b *testing.B) {
	defer useSplitKernels(bestSplit())
	const n = 1 << 16
	r8, syms := randomBytes(n, 1), randomBytes(n, 2)
	var pl [4][]byte
	for i := range pl {
		pl[i] = randomBytes(n, uint64(3+i))
	}
	buf := make([]byte, 4*n+64)
	dst := buf[int(-uintptr(unsafe.Pointer(&buf[0]))&63):][:4*n]
	for _, k := range splitKernels() {
		for _, nt := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/nt=%v/bf16", k, nt), func(b *testing.B) {
				useSplitKernels(k)
				b.SetBytes(2 * n)
				for i := 0; i < b.N; i++ {
					mergeBF16CRC(dst[:2*n], r8, syms, nt)
				}
			})
			b.Run(fmt.Sprintf("%s/nt=%v/fp32", k, nt), func(b *testing.B) {
				useSplitKernels(k)
				b.SetBytes(4 * n)
				for i := 0; i < b.N; i++ {
					mergeFP32CRC(dst, &pl, nt)
				}
			})
		}
	}
}
