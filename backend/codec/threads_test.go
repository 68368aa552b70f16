package codec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
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
		for _, k := range []Kind{Raw, Zip3, Huff, Huff2, Huff2Packed} {
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
// writes, split mode's included (but for packed frames, which have none),
// for sizes around the segment size.
func TestEncodeThreads(t *testing.T) {
	smallSegments(t)
	var e Encoder
	for _, dt := range append(codedTypes, dtype.Int32) {
		for _, k := range []Kind{Raw, Zip3, Huff, Huff2, Huff2Packed, Auto} {
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
				if k == Huff2Packed {
					continue
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

// bf16 and fp16 huff2 tensors of one segment encode on two goroutines
// (encodeHuff2TwoStage) into the frame one thread writes, with every record
// mode in play: Huffman, raw and run planes, tables kept and rebuilt, a
// short last block, and a frame that falls back to raw.
//
// Either goroutine codes every block when the other never gets to: the
// caller when the helper does not start, the helper when it runs before the
// caller looks; and a helper that leaves, or a caller that sleeps, at its
// first wait changes nothing.
func TestEncodeHuff2TwoStage(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("two stages need GOMAXPROCS >= 2")
	}
	alone := map[string]func(*sync.WaitGroup, func()){
		"caller alone": func(*sync.WaitGroup, func()) {},
		"helper first": func(_ *sync.WaitGroup, f func()) { f() },
	}
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		for _, n := range []int{1<<16 + 7, 5 << 16, 3<<16 + 777} {
			// plane 1 coded: values on a coarse grid (few mantissa bits)
			coarse := fromF64(dt, func() []float64 {
				v := make([]float64, n)
				r := rand.New(rand.NewPCG(uint64(n), 1))
				for i := range v {
					v[i] = float64(r.IntN(9)-4) / 8
				}
				return v
			}())
			mixed := gauss(dt, n, 0.02, 1)
			copy(mixed[len(mixed)/3:], make([]byte, len(mixed)/3)) // a run of zeros: run records
			for name, src := range map[string][]byte{
				"gauss": gauss(dt, n, 0.5, uint64(n)), "coarse": coarse, "mixed": mixed,
				"random": randomBytes(n*dt.Size(), 6), "constant": make([]byte, n*dt.Size()),
			} {
				for _, k := range []Kind{Huff2, Huff2Packed} {
					want, err := NewEncoder().Encode([]byte("pre"), src, dt, k)
					require.NoError(t, err)
					got, _, err := EncodeThreads([]byte("pre"), src, dt, k, 2)
					require.NoError(t, err)
					require.True(t, bytes.Equal(want, got), "%v %v %s %d", dt, k, name, n)
					for who, start := range alone {
						saved := startHelper
						startHelper = start
						one, _, err := EncodeThreads([]byte("pre"), src, dt, k, 2)
						startHelper = saved
						require.NoError(t, err)
						require.True(t, bytes.Equal(want, one), "%v %v %s %d, %s", dt, k, name, n, who)
					}
					// a helper that leaves at its first wait, and a caller
					// that sleeps at its first
					idle, spin := helperIdle, callerSpin
					helperIdle, callerSpin = 0, 0
					hasty, _, err := EncodeThreads([]byte("pre"), src, dt, k, 2)
					helperIdle, callerSpin = idle, spin
					require.NoError(t, err)
					require.True(t, bytes.Equal(want, hasty), "%v %v %s %d, no waiting", dt, k, name, n)
					out := make([]byte, len(src))
					_, err = NewDecoder().Decode(out, got[3:])
					require.NoError(t, err)
					require.True(t, bytes.Equal(src, out), "%v %v %s %d", dt, k, name, n)
				}
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

// BenchmarkThreads: packed huff2 (what zipccl.codec writes) on one thread and two, at two segments (one
// each) and at half a segment (encodeHuff2TwoStage).
func BenchmarkThreads(b *testing.B) {
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		for _, numel := range []int{2 * segmentElems, segmentElems / 2} {
			src := gauss(dt, numel, 0.02, 1)
			frame, _, _ := EncodeThreads(nil, src, dt, Huff2Packed, 1)
			for _, threads := range []int{1, 2} {
				buf := make([]byte, 0, 2*len(src))
				b.Run(fmt.Sprintf("%v/%d/encode/t%d", dt, numel, threads), func(b *testing.B) {
					b.SetBytes(int64(len(src)))
					for b.Loop() {
						buf, _, _ = EncodeThreads(buf[:0], src, dt, Huff2Packed, threads)
					}
				})
				out := make([]byte, len(src))
				b.Run(fmt.Sprintf("%v/%d/decode/t%d", dt, numel, threads), func(b *testing.B) {
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
}
