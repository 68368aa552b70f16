package codec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zipccl/zipccl/backend/dtype"
)

// smallSegments makes segments and decoding threads' runs 2^18 and 2^16
// elements for the test, so that small tensors take several threads.
func smallSegments(t testing.TB) {
	seg, dec := segmentElems, decodeThreadElems
	segmentElems, decodeThreadElems = 1<<18, 1<<16
	t.Cleanup(func() { segmentElems, decodeThreadElems = seg, dec })
}

// Frames of several blocks decode the same on any number of threads, and a
// damaged frame fails on every thread count that one thread fails on.
func TestDecodeThreads(t *testing.T) {
	smallSegments(t)
	var e Encoder
	for _, dt := range append(codedTypes, dtype.Int32) {
		for _, k := range []Kind{Raw, Zip3, Huff, Huff2} {
			// 3.1 segments: every kind has a short last block
			n := 3*segmentElems + 1<<15 + 7
			src := randomBytes(4*n, 2)
			if dt != dtype.Int32 {
				src = gauss(dt, n, 0.5, 3)
			}
			frame, err := e.Encode(nil, src, dt, k)
			require.NoError(t, err)
			name := fmt.Sprintf("%v/%v", dt, e.Kind())
			for _, threads := range []int{1, 2, 3, 4, 64} {
				out := make([]byte, len(src))
				m, err := DecodeThreads(out, frame, threads)
				require.NoError(t, err, "%s threads=%d", name, threads)
				require.Equal(t, len(frame), m, name)
				require.True(t, bytes.Equal(src, out), "%s threads=%d", name, threads)
			}
			rng := rand.New(rand.NewPCG(uint64(dt), uint64(k)))
			var d Decoder
			for range 40 {
				bad := bytes.Clone(frame)
				pos := HeaderLen + rng.IntN(len(bad)-HeaderLen)
				bad[pos] ^= byte(1 + rng.IntN(255))
				out1 := make([]byte, len(src))
				_, err1 := d.Decode(out1, bad)
				out2 := make([]byte, len(src))
				_, err2 := DecodeThreads(out2, bad, 3)
				require.Equal(t, err1 == nil, err2 == nil, "%s byte %d: %v vs %v", name, pos, err1, err2)
				if err1 == nil {
					require.True(t, bytes.Equal(out1, out2), "%s byte %d", name, pos)
				} else {
					require.Equal(t, err1.Error(), err2.Error(), "%s byte %d: the first failing block is reported", name, pos)
				}
			}
		}
	}
}

// A frame coded on any number of threads is the one frame one thread
// writes, split mode's included, for sizes around the segment size.
func TestEncodeThreads(t *testing.T) {
	smallSegments(t)
	var e Encoder
	for _, dt := range append(codedTypes, dtype.Int32) {
		for _, k := range []Kind{Raw, Zip3, Huff, Huff2, Auto} {
			for _, n := range []int{0, 5, segmentElems, 3*segmentElems + 1<<16 + 11} {
				src := randomBytes(4*n, 4)
				if dt != dtype.Int32 {
					src = gauss(dt, n, 0.5, uint64(n))
				}
				want, err := e.Encode([]byte("pre"), src, dt, k)
				require.NoError(t, err)
				name := fmt.Sprintf("%v/%v/%d", dt, k, n)
				for _, threads := range []int{1, 2, 3, 8} {
					got, used, err := EncodeThreads([]byte("pre"), src, dt, k, threads)
					require.NoError(t, err, name)
					require.Equal(t, e.Kind(), used, name)
					require.True(t, bytes.Equal(want, got), "%s threads=%d", name, threads)
				}
				kind := e.Kind()
				st, err := e.EncodeStatic(nil, src, dt, k)
				require.NoError(t, err)
				dyn, err := e.EncodeDynamic(nil)
				require.NoError(t, err)
				if e.Kind() == kind { // else Encode fell back to raw
					require.True(t, bytes.Equal(want[3+HeaderLen:], append(st, dyn...)), "%s: split mode", name)
				}
				out := make([]byte, len(src))
				require.NoError(t, NewDecoder().DecodeSplit(out, st, dyn, dt, e.Kind()))
				require.True(t, bytes.Equal(src, out), name)
			}
		}
	}
}

// A frame that falls back to raw does so on every thread count.
func TestEncodeThreadsRawFallback(t *testing.T) {
	smallSegments(t)
	n := 2*segmentElems + 3
	src := randomBytes(2*n, 5) // random exponents: zip3 escapes most of them
	want, err := NewEncoder().Encode(nil, src, dtype.BFloat16, Zip3)
	require.NoError(t, err)
	got, used, err := EncodeThreads(nil, src, dtype.BFloat16, Zip3, 2)
	require.NoError(t, err)
	require.Equal(t, Raw, used)
	require.True(t, bytes.Equal(want, got))
}

func BenchmarkThreads(b *testing.B) {
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		src := gauss(dt, 2*segmentElems, 0.02, 1)
		for _, threads := range []int{1, 2} {
			frame, _, _ := EncodeThreads(nil, src, dt, Huff2, 1)
			buf := make([]byte, 0, 2*len(src))
			b.Run(fmt.Sprintf("%v/encode/t%d", dt, threads), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					buf, _, _ = EncodeThreads(buf[:0], src, dt, Huff2, threads)
				}
			})
			out := make([]byte, len(src))
			b.Run(fmt.Sprintf("%v/decode/t%d", dt, threads), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					if _, err := DecodeThreads(out, frame, threads); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// FuzzDecodeThreadsDamage damages two bytes of a frame of three segments
// (kind and dtype picked by the fuzzer) and requires the threaded decode to
// agree with one thread: the same verdict, the same error, the same bytes.
func FuzzDecodeThreadsDamage(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint32(40), uint8(1), uint32(9000), uint8(0x80))
	f.Add(uint8(1), uint8(1), uint32(100000), uint8(7), uint32(0), uint8(0))
	f.Add(uint8(2), uint8(2), uint32(300000), uint8(0xff), uint32(5), uint8(2))
	frames := map[[2]uint8][]byte{}
	f.Fuzz(func(t *testing.T, dti, ki uint8, p1 uint32, x1 uint8, p2 uint32, x2 uint8) {
		smallSegments(t)
		key := [2]uint8{dti % uint8(len(codedTypes)), ki % 4}
		dt, k := codedTypes[key[0]], []Kind{Raw, Zip3, Huff, Huff2}[key[1]]
		n := 3 * segmentElems
		frame, ok := frames[key]
		if !ok {
			var err error
			frame, err = NewEncoder().Encode(nil, gauss(dt, n, 0.5, 9), dt, k)
			require.NoError(t, err)
			frames[key] = frame
		}
		bad := bytes.Clone(frame)
		bad[int(p1)%len(bad)] ^= x1
		bad[int(p2)%len(bad)] ^= x2
		h, err := PeekHeader(bad)
		if err != nil || h.RawLen != n*dt.Size() {
			return
		}
		out1, out2 := make([]byte, h.RawLen), make([]byte, h.RawLen)
		_, err1 := NewDecoder().Decode(out1, bad)
		_, err2 := DecodeThreads(out2, bad, 3)
		require.Equal(t, err1 == nil, err2 == nil, "%v vs %v", err1, err2)
		if err1 == nil {
			require.True(t, bytes.Equal(out1, out2))
		}
	})
}
