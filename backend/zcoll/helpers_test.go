package zcoll

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/internal/elems"
	"github.com/zipccl/zipccl/backend/reduce"
)

type opFunc func(context.Context, collective.VarConn, Args) error

// testDTypes: every coded float type, float64 (framed raw) and an integer.
var testDTypes = []dtype.DType{
	dtype.BFloat16, dtype.Float16, dtype.Float32,
	dtype.Float8E4M3FN, dtype.Float8E5M2, dtype.Float64, dtype.Int32,
}

// testSegment is the Plan.Segment of the correctness tests: small, so that
// small buffers need many segments (and many codec frames).
const testSegment = 96

// namedPlan is a Plan with a short name for subtests.
type namedPlan struct {
	name string
	p    Plan
}

// plansFor lists the plans every op is run with: plain, framed with each
// kind, and (for ops built on all-to-all) design 2 with each kind.
func plansFor(a2a bool, seg int) []namedPlan {
	ps := []namedPlan{{"plain", Plan{Segment: seg}}}
	for _, k := range []codec.Kind{codec.Raw, codec.Zip3, codec.Huff, codec.Auto} {
		ps = append(ps, namedPlan{k.String(), Plan{Framed: true, Kind: k, Segment: seg}})
		if a2a {
			ps = append(ps, namedPlan{k.String() + "/d2", Plan{Framed: true, Kind: k, Segment: seg, A2ADesign: 2}})
		}
	}
	return ps
}

// Data sets.
type dataKind int

const (
	gaussian dataKind = iota
	specials          // Gaussian with NaN, ±Inf, subnormals, ±0 mixed in
	randBits          // incompressible
	constant
	numDataKinds
)

var dataNames = [...]string{"gauss", "special", "random", "const"}

func (k dataKind) String() string { return dataNames[k] }

// genData returns numel elements of dt.
func genData(rng *rand.Rand, dt dtype.DType, numel int, kind dataKind) []byte {
	es := dt.Size()
	b := make([]byte, numel*es)
	switch kind {
	case randBits:
		var seed [32]byte
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		rand.NewChaCha8(seed).Read(b)
		return b
	case constant:
		v := fromFloat(dt, 1.375)
		for i := range numel {
			store(b, es, i, v)
		}
		return b
	}
	sigma := math.Pow(2, float64(rng.IntN(12)-8))
	for i := range numel {
		store(b, es, i, fromFloat(dt, rng.NormFloat64()*sigma))
	}
	if kind == specials {
		sp := specialBits[es]
		for i := rng.IntN(4); i < numel; i += 1 + rng.IntN(6) {
			store(b, es, i, sp[rng.IntN(len(sp))])
		}
	}
	return b
}

// specialBits are NaNs (quiet, signalling, with payloads, both signs),
// infinities, subnormals, signed zeros and extremes, by element size.
var specialBits = map[int][]uint64{
	1: {0x00, 0x80, 0x01, 0x81, 0x7F, 0xFF, 0x7E, 0xFE, 0x7C, 0xFC, 0x7D, 0x03, 0x83},
	2: {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x7C00, 0xFC00, 0x7C01, 0xFE00, 0x7E00,
		0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x007F, 0x7F7F, 0xFFFF},
	4: {0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
		0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0xFFFFFFFF},
	8: {0, 1 << 63, 1, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x7FF0000000000000, 0xFFF0000000000000,
		0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000001, 0x8000000000000001},
}

func fromFloat(dt dtype.DType, f float64) uint64 {
	switch dt {
	case dtype.Float32:
		return uint64(math.Float32bits(float32(f)))
	case dtype.Float64:
		return math.Float64bits(f)
	case dtype.BFloat16:
		return uint64(dtype.F32ToBF16(float32(f)))
	case dtype.Float16:
		return uint64(dtype.F32ToF16(float32(f)))
	case dtype.Float8E4M3FN:
		return uint64(dtype.F32ToE4M3FN(float32(f)))
	case dtype.Float8E5M2:
		return uint64(dtype.F32ToE5M2(float32(f)))
	}
	return uint64(int64(f * 1000)) // integers: small values
}

// load and store access one element (backend/internal/elems).
var load, store = elems.Load, elems.Store

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Scalar reference of the documented reduction order, written without the
// float32-accumulation kernels: for bfloat16/float16/float8 SUM and
// PRODUCT, float32 steps in rank order (x86 NaN rule) and one rounding;
// otherwise a rank-order chain of reduce.Reduce3 in the dtype.
func refReduce(dt dtype.DType, op reduce.Op, xs [][]byte) []byte {
	n := len(xs)
	if n == 1 {
		return clone(xs[0])
	}
	if !reduce.Accumulable(dt, op) {
		acc := clone(xs[0])
		for _, x := range xs[1:] {
			reduce.Reduce3(dt, op, acc, acc, x)
		}
		return acc
	}
	es := dt.Size()
	out := make([]byte, len(xs[0]))
	for i := range len(out) / es {
		acc := wide(dt, load(xs[0], es, i))
		for _, x := range xs[1:] {
			y := wide(dt, load(x, es, i))
			var r float32
			if op == reduce.Product {
				r = mul32(acc, y)
			} else {
				r = add32(acc, y)
			}
			if r != r {
				r = refNaN(acc, y)
			}
			acc = r
		}
		store(out, es, i, narrow(dt, acc))
	}
	return out
}

//go:noinline
func add32(x, y float32) float32 { return x + y }

//go:noinline
func mul32(x, y float32) float32 { return x * y }

func refNaN(x, y float32) float32 {
	switch {
	case x != x:
		return math.Float32frombits(math.Float32bits(x) | 1<<22)
	case y != y:
		return math.Float32frombits(math.Float32bits(y) | 1<<22)
	}
	return math.Float32frombits(0xFFC00000)
}

func wide(dt dtype.DType, x uint64) float32 {
	switch dt {
	case dtype.BFloat16:
		return dtype.BF16ToF32(uint16(x))
	case dtype.Float16:
		return dtype.F16ToF32(uint16(x))
	case dtype.Float8E4M3FN:
		return dtype.E4M3FNToF32(uint8(x))
	case dtype.Float8E5M2:
		return dtype.E5M2ToF32(uint8(x))
	}
	panic("not narrow")
}

func narrow(dt dtype.DType, f float32) uint64 {
	switch dt {
	case dtype.BFloat16:
		return uint64(dtype.F32ToBF16(f))
	case dtype.Float16:
		return uint64(dtype.F32ToF16(f))
	case dtype.Float8E4M3FN:
		return uint64(dtype.F32ToE4M3FN(f))
	case dtype.Float8E5M2:
		return uint64(dtype.F32ToE5M2(f))
	}
	panic("not narrow")
}

// runOpts tune runWorld.
type runOpts struct {
	// abortOnError aborts the world when a rank's operation fails, as the
	// engine breaks the group, so that ranks waiting for that rank's
	// messages return instead of waiting for their deadline.
	abortOnError bool
	timeout      time.Duration
}

// runWorld runs f on every rank of w concurrently and returns the per-rank
// errors. It fails the test if the ranks do not finish in time or leave
// goroutines behind.
func runWorld(t testing.TB, w *conntest.World, f opFunc, args []Args, o runOpts) []error {
	t.Helper()
	before := runtime.NumGoroutine()
	if o.timeout == 0 {
		o.timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	conns := w.Conns()
	errs := make([]error, w.Size())
	var wg sync.WaitGroup
	for r := range w.Size() {
		wg.Go(func() {
			errs[r] = f(ctx, conns[r], args[r])
			if errs[r] != nil && o.abortOnError {
				w.Abort(fmt.Errorf("rank %d failed: %w", r, errs[r]), -1)
			}
		})
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
