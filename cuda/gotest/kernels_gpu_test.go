//go:build gpu

package gotest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
)

func open(t *testing.T) *Lib {
	t.Helper()
	path := os.Getenv("ZIPCCL_CUDA_LIB")
	if path == "" {
		path, _ = filepath.Abs("../../build/cuda/libzipccl_cuda.so")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("libzipccl_cuda.so not built (%s): run make cuda or set ZIPCCL_CUDA_LIB", path)
	}
	l, err := Open(path)
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("no GPU: %s sees no CUDA device", path)
	}
	if err != nil {
		if strings.Contains(err.Error(), "driver") || strings.Contains(err.Error(), "no CUDA-capable device") {
			t.Skipf("no GPU: %v", err)
		}
		t.Fatal(err)
	}
	t.Logf("%s", l.BuildInfo())
	return l
}

// emulated reports whether the library is the CPU emulation (smaller sizes).
func emulated(l *Lib) bool { return strings.Contains(l.BuildInfo(), "cuda_emu") }

var coded = []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32, dtype.Float8E4M3FN, dtype.Float8E5M2}

// gaussian returns n elements of N(0, sigma^2) in dt.
func gaussian(dt dtype.DType, n int, sigma float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 17))
	b := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		dtype.PutFloat32(dt, b, i, float32(r.NormFloat64()*sigma))
	}
	return b
}

func sizes(l *Lib) []int {
	s := []int{0, 1, 100, 16384, 16385, 70001}
	if !emulated(l) {
		s = append(s, 1<<20+7, 9<<20)
	}
	return s
}

func TestEncodeMatchesGo(t *testing.T) {
	l := open(t)
	var e codec.Encoder
	var d codec.Decoder
	for _, dt := range coded {
		for i, n := range sizes(l) {
			src := gaussian(dt, n, 0.02, uint64(i))
			frames, err := l.Encode(int(dt), src, []int64{int64(n)})
			if err != nil {
				t.Fatalf("%v n=%d: %v", dt, n, err)
			}
			want, err := e.Encode(nil, src, dt, codec.Zip3)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(frames[0], want) {
				t.Fatalf("%v n=%d: GPU frame (%d bytes) differs from the Go frame (%d bytes)", dt, n, len(frames[0]), len(want))
			}
			out := make([]byte, len(src))
			if _, err := d.Decode(out, frames[0]); err != nil || !bytes.Equal(out, src) {
				t.Fatalf("%v n=%d: Go decode of the GPU frame: %v", dt, n, err)
			}
		}
	}
}

func TestDecodeGoFrames(t *testing.T) {
	l := open(t)
	var e codec.Encoder
	for _, dt := range coded {
		for i, n := range sizes(l) {
			src := gaussian(dt, n, 0.02, uint64(100+i))
			frame, err := e.Encode(nil, src, dt, codec.Zip3)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.Decode(int(dt), dt.Size(), [][]byte{frame}, []int64{int64(n)})
			if err != nil {
				t.Fatalf("%v n=%d: %v", dt, n, err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("%v n=%d: GPU decode of the Go frame differs", dt, n)
			}
		}
	}
}

func TestChunkPerDestination(t *testing.T) {
	l := open(t)
	counts := []int64{1000, 3, 0, 5001, 16385, 77, 20000}
	var total int64
	for _, c := range counts {
		total += c
	}
	// an all-to-all over 50 ranks: more chunks than one launch takes
	for i := 0; i < 43; i++ {
		counts = append(counts, int64(i*131%400))
		total += counts[len(counts)-1]
	}
	dt := dtype.BFloat16
	src := gaussian(dt, int(total), 0.02, 5)
	frames, err := l.Encode(int(dt), src, counts)
	if err != nil {
		t.Fatal(err)
	}
	var e codec.Encoder
	off := int64(0)
	for k, c := range counts {
		want, _ := e.Encode(nil, src[2*off:2*(off+c)], dt, codec.Zip3)
		if !bytes.Equal(frames[k], want) {
			t.Fatalf("chunk %d (%d elements): GPU frame differs from Go", k, c)
		}
		off += c
	}
	got, err := l.Decode(int(dt), 2, frames, counts)
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("decoding the chunks: %v", err)
	}
}

// fold is backend/zcoll's reduce-scatter arithmetic (rank order).
func fold(dt dtype.DType, op reduce.Op, srcs [][]byte) []byte {
	out := make([]byte, len(srcs[0]))
	n := len(srcs)
	switch {
	case n == 1:
		copy(out, srcs[0])
	case n == 2:
		reduce.Reduce3(dt, op, out, srcs[0], srcs[1])
	case reduce.Accumulable(dt, op):
		acc := make([]float32, len(out)/dt.Size())
		reduce.AccumInit(dt, op, acc, srcs[0], srcs[1])
		for i := 2; i < n-1; i++ {
			reduce.Accum(dt, op, acc, srcs[i])
		}
		reduce.AccumFinish(dt, op, out, acc, srcs[n-1])
	default:
		reduce.Reduce3(dt, op, out, srcs[0], srcs[1])
		for i := 2; i < n; i++ {
			reduce.Reduce(dt, op, out, srcs[i])
		}
	}
	return out
}

func TestDecodeReduceMatchesFold(t *testing.T) {
	l := open(t)
	n := 17000 // two blocks and a tail
	if !emulated(l) {
		n = 3<<20 + 5
	}
	var e codec.Encoder
	for _, dt := range coded {
		for _, nsrc := range []int{1, 2, 3, 8} {
			for _, op := range []reduce.Op{reduce.Sum, reduce.Product} {
				srcs := make([][]byte, nsrc)
				frames := make([][]byte, nsrc)
				for r := range srcs {
					srcs[r] = gaussian(dt, n, 1, uint64(1000*nsrc+r))
					frames[r], _ = e.Encode(nil, srcs[r], dt, codec.Zip3)
				}
				got, err := l.DecodeReduce(int(dt), dt.Size(), int(op), frames, int64(n))
				if err != nil {
					t.Fatalf("%v %v nsrc=%d: %v", dt, op, nsrc, err)
				}
				if !bytes.Equal(got, fold(dt, op, srcs)) {
					t.Fatalf("%v %v nsrc=%d: decode+reduce differs from the Go fold", dt, op, nsrc)
				}
			}
		}
	}
}

func TestCorruptFrameRejected(t *testing.T) {
	l := open(t)
	var e codec.Encoder
	src := gaussian(dtype.BFloat16, 40000, 0.02, 9)
	frame, _ := e.Encode(nil, src, dtype.BFloat16, codec.Zip3)
	for _, pos := range []int{3, 40, 32 + 16 + 5, len(frame) / 2, len(frame) - 100} {
		bad := append([]byte{}, frame...)
		bad[pos] ^= 0x08
		if _, err := l.Decode(int(dtype.BFloat16), 2, [][]byte{bad}, []int64{40000}); err == nil {
			t.Fatalf("flip at byte %d accepted", pos)
		}
	}
}
