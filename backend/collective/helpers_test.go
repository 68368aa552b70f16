package collective

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/reduce"
)

type opFunc func(context.Context, Conn, Args) error

// worlds are the group sizes every operation is tested at.
var worlds = []int{1, 2, 3, 4, 5, 8}

// elemCounts: empty, single, fewer than ranks, odd, not divisible by any
// world size, and large enough to need many segments with testTuning.
var elemCounts = []int{0, 1, 3, 17, 101, 1001, 4099}

// reductions are the (dtype, op) pairs the reduction tests run. Floats
// with varied magnitudes make every association order give different bits,
// so matching the reference bit for bit pins the documented order.
var reductions = []struct {
	dt dtype.DType
	op reduce.Op
}{
	{dtype.Float32, reduce.Sum},
	{dtype.Float32, reduce.Max},
	{dtype.BFloat16, reduce.Sum},
	{dtype.Float64, reduce.Product},
	{dtype.Int64, reduce.Sum},
	{dtype.Float16, reduce.Min},
	{dtype.Int32, reduce.BXor},
}

// setTuning makes segments tiny so small test buffers exercise the
// pipeline (many segments per block, prefetch, forwarding), and forces the
// direct or the ring/chain algorithms. It restores the knobs afterwards.
func setTuning(t testing.TB, direct bool) {
	saved := []int{AllReduceDirectMax, ReduceScatterDirectMax, ReduceDirectMax, AllGatherDirectMax, BroadcastDirectMax, SegmentMin, SegmentMax, SegmentsPerBlock, Prefetch}
	t.Cleanup(func() {
		AllReduceDirectMax, ReduceScatterDirectMax, ReduceDirectMax, AllGatherDirectMax, BroadcastDirectMax = saved[0], saved[1], saved[2], saved[3], saved[4]
		SegmentMin, SegmentMax, SegmentsPerBlock, Prefetch = saved[5], saved[6], saved[7], saved[8]
	})
	thr := -1
	if direct {
		thr = math.MaxInt
	}
	AllReduceDirectMax, ReduceScatterDirectMax, ReduceDirectMax, AllGatherDirectMax, BroadcastDirectMax = thr, thr, thr, thr, thr
	SegmentMin, SegmentMax, SegmentsPerBlock, Prefetch = 8, 256, 4, 2
}

func algoName(direct bool) string {
	if direct {
		return "direct"
	}
	return "ring"
}

// randData returns numel random elements of dt, with magnitudes spread over
// several decades for floats.
func randData(rng *rand.Rand, dt dtype.DType, numel int) []byte {
	es := dt.Size()
	b := make([]byte, numel*es)
	for i := range numel {
		f := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3))
		p := b[i*es:]
		switch dt {
		case dtype.Float32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(f)))
		case dtype.Float64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(f))
		case dtype.BFloat16:
			binary.LittleEndian.PutUint16(p, dtype.F32ToBF16(float32(f)))
		case dtype.Float16:
			binary.LittleEndian.PutUint16(p, dtype.F32ToF16(float32(f/100)))
		default:
			for j := range es {
				p[j] = byte(rng.Uint32())
			}
		}
	}
	return b
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// refChain reduces parts in the order parts[start], parts[start+1], ...
// (indices mod len(parts)), accumulating on the left: the association every
// algorithm documents (start = 0 for direct, b+1 for ring block b).
func refChain(dt dtype.DType, op reduce.Op, parts [][]byte, start int) []byte {
	n := len(parts)
	acc := clone(parts[start%n])
	for i := 1; i < n; i++ {
		reduce.Reduce3(dt, op, acc, acc, parts[(start+i)%n])
	}
	return acc
}

// refAllReduce is the expected all-reduce (and reduce) result of the
// per-rank buffers xs.
func refAllReduce(dt dtype.DType, op reduce.Op, xs [][]byte, direct bool) []byte {
	n, es := len(xs), dt.Size()
	if direct || n == 1 {
		return refChain(dt, op, xs, 0)
	}
	out := make([]byte, len(xs[0]))
	outs := bufs.Split(out, n, es)
	for b := range n {
		parts := make([][]byte, n)
		for r := range n {
			parts[r] = bufs.Split(xs[r], n, es)[b]
		}
		copy(outs[b], refChain(dt, op, parts, b+1))
	}
	return out
}

// runOp runs f on every rank of w concurrently and returns the per-rank
// errors. It fails the test if the ranks do not finish in time or leave
// goroutines behind.
func runOp(t testing.TB, w *conntest.World, f opFunc, args []Args) []error {
	t.Helper()
	return runOpCtx(t, context.Background(), w, f, args, nil)
}

func runOpCtx(t testing.TB, parent context.Context, w *conntest.World, f opFunc, args []Args, skip map[int]bool) []error {
	t.Helper()
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	conns := w.Conns()
	errs := make([]error, w.Size())
	var wg sync.WaitGroup
	for r := range w.Size() {
		if skip[r] {
			continue
		}
		wg.Go(func() { errs[r] = f(ctx, conns[r], args[r]) })
	}
	wg.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatalf("operation did not finish in time (hang): %v", errs)
	}
	checkGoroutines(t, before)
	return errs
}

// Shared with the other algorithm package's tests (internal/conntest).
var (
	checkGoroutines = conntest.CheckGoroutines
	mustOK          = conntest.MustOK
	sameBytes       = conntest.SameBytes
)
