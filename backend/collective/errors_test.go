package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/reduce"
)

// opCase builds valid arguments for one collective on n ranks.
type opCase struct {
	name string
	f    opFunc
	mk   func(n int) []Args
}

func opCases(numel int) []opCase {
	rng := rand.New(rand.NewPCG(9, uint64(numel)))
	data := func() []byte { return randData(rng, dtype.Float32, numel) }
	many := func(n int) [][]byte {
		bs := make([][]byte, n)
		for i := range bs {
			bs[i] = data()
		}
		return bs
	}
	return []opCase{
		{"allreduce", AllReduce, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				b := data()
				as[r] = Args{DType: dtype.Float32, In: [][]byte{b}, Out: [][]byte{b}}
			}
			return as
		}},
		{"reducescatter", ReduceScatter, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				as[r] = Args{DType: dtype.Float32, In: many(n), Out: [][]byte{data()}}
			}
			return as
		}},
		{"reduce", Reduce, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				as[r] = Args{DType: dtype.Float32, Root: n - 1, In: [][]byte{data()}, Out: [][]byte{data()}}
			}
			return as
		}},
		{"allgather", AllGather, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				as[r] = Args{DType: dtype.Float32, In: [][]byte{data()}, Out: many(n)}
			}
			return as
		}},
		{"broadcast", Broadcast, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				b := data()
				as[r] = Args{DType: dtype.Float32, Root: 1 % n, In: [][]byte{b}, Out: [][]byte{b}}
			}
			return as
		}},
		{"gather", Gather, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				as[r] = Args{DType: dtype.Float32, In: [][]byte{data()}}
			}
			as[0].Out = many(n)
			return as
		}},
		{"scatter", Scatter, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				as[r] = Args{DType: dtype.Float32, Out: [][]byte{data()}}
			}
			as[0].In = many(n)
			return as
		}},
		{"alltoall", AllToAll, func(n int) []Args {
			as := make([]Args, n)
			for r := range as {
				as[r] = Args{DType: dtype.Float32, In: many(n), Out: many(n)}
			}
			return as
		}},
	}
}

var errInjected = errors.New("injected failure")

// A Conn failing on one message (as a broken connection would, aborting the
// group) makes the failing rank return that error, wrapped with what
// failed, every other rank return promptly, and nothing leak.
func TestFailure(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(algoName(direct), func(t *testing.T) {
			setTuning(t, direct)
			for _, oc := range opCases(257) {
				for _, n := range []int{2, 3, 5} {
					for _, send := range []bool{true, false} {
						for _, at := range []int{0, 1, 7, 40} {
							victim := n / 2
							name := fmt.Sprintf("%s/n%d/send=%v/at%d", oc.name, n, send, at)
							var calls atomic.Int64
							w := conntest.NewWorld(n)
							w.Fail = func(src, dst int, slot uint32, s bool) error {
								if src == victim && s == send && calls.Add(1)-1 == int64(at) {
									return fmt.Errorf("%w (rank %d)", errInjected, src)
								}
								return nil
							}
							errs := runOp(t, w, oc.f, oc.mk(n))
							if calls.Load() <= int64(at) {
								// The victim made fewer calls: nothing failed.
								mustOK(t, w, errs)
								continue
							}
							verr := errs[victim]
							if !errors.Is(verr, errInjected) {
								t.Fatalf("%s: victim returned %v, want the injected error", name, verr)
							}
							var ce *Error
							if !errors.As(verr, &ce) || ce.Op != oc.name || !strings.Contains(verr.Error(), oc.name) {
								t.Fatalf("%s: victim error %q does not say what failed", name, verr)
							}
							for r, err := range errs {
								if err != nil && !errors.Is(err, errInjected) && !errors.Is(err, conntest.ErrAborted) {
									t.Fatalf("%s: rank %d: unexpected error %v", name, r, err)
								}
							}
						}
					}
				}
			}
		})
	}
}

// Cancelling the context unblocks every rank waiting on a peer that never
// shows up, and they return the context's error without leaking.
func TestCancel(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(algoName(direct), func(t *testing.T) {
			setTuning(t, direct)
			for _, oc := range opCases(513) {
				for _, n := range []int{2, 4} {
					// Pick a rank someone has to hear from.
					absent := map[string]int{"gather": n - 1, "broadcast": 1 % n}[oc.name]
					ctx, cancel := context.WithCancel(context.Background())
					timer := time.AfterFunc(20*time.Millisecond, cancel)
					w := conntest.NewWorld(n)
					errs := runOpCtx(t, ctx, w, oc.f, oc.mk(n), map[int]bool{absent: true})
					timer.Stop()
					cancel()
					waiting := 0
					for r, err := range errs {
						if r == absent || err == nil {
							continue
						}
						if !errors.Is(err, context.Canceled) {
							t.Fatalf("%s/n%d: rank %d: got %v, want context.Canceled", oc.name, n, r, err)
						}
						waiting++
					}
					if waiting == 0 {
						t.Fatalf("%s/n%d: no rank waited for the absent one", oc.name, n)
					}
					if oc.name == "allreduce" && waiting != n-1 {
						t.Fatalf("%s/n%d: only %d ranks returned an error", oc.name, n, waiting)
					}
				}
			}
		})
	}
}

// The arrival order must not matter: with random delays on every message
// the results are bit-identical to the reference, run after run, whatever
// the number of receives kept posted.
func TestJitterDeterminism(t *testing.T) {
	for _, direct := range []bool{true, false} {
		setTuning(t, direct)
		n, numel := 5, 999
		rng := rand.New(rand.NewPCG(5, 5))
		xs := make([][]byte, n)
		for r := range n {
			xs[r] = randData(rng, dtype.Float32, numel)
		}
		want := refAllReduce(dtype.Float32, reduce.Sum, xs, direct)
		for _, pf := range []int{1, 2, 5} {
			Prefetch = pf
			args := make([]Args, n)
			for r := range n {
				b := clone(xs[r])
				args[r] = Args{DType: dtype.Float32, In: [][]byte{b}, Out: [][]byte{b}}
			}
			w := conntest.NewWorld(n)
			w.Jitter = 200 * time.Microsecond
			mustOK(t, w, runOp(t, w, AllReduce, args))
			for r := range n {
				sameBytes(t, fmt.Sprintf("jittered allreduce, prefetch %d", pf), args[r].Out[0], want)
			}
		}
	}
}

func TestValidation(t *testing.T) {
	w := conntest.NewWorld(2)
	c := w.Conns()[0]
	ctx := context.Background()
	b := make([]byte, 8)
	odd := make([]byte, 6)
	wide := make([]byte, 16)
	cases := []struct {
		name string
		f    opFunc
		a    Args
	}{
		{"avg", AllReduce, Args{DType: dtype.Float32, Op: reduce.Avg, In: [][]byte{b}, Out: [][]byte{b}}},
		{"premulsum", AllReduce, Args{DType: dtype.Float32, Op: reduce.PreMulSum, In: [][]byte{b}, Out: [][]byte{b}}},
		{"bad dtype", AllReduce, Args{DType: dtype.Invalid, In: [][]byte{b}, Out: [][]byte{b}}},
		{"partial element", AllReduce, Args{DType: dtype.Float32, In: [][]byte{odd}, Out: [][]byte{odd}}},
		{"length mismatch", AllReduce, Args{DType: dtype.Float32, In: [][]byte{b}, Out: [][]byte{b[:4]}}},
		{"missing out", AllReduce, Args{DType: dtype.Float32, In: [][]byte{b}}},
		{"rs in count", ReduceScatter, Args{DType: dtype.Float32, In: [][]byte{b}, Out: [][]byte{b}}},
		{"rs uneven", ReduceScatter, Args{DType: dtype.Float32, In: [][]byte{b, b[:4]}, Out: [][]byte{b}}},
		{"rs partial alias", ReduceScatter, Args{DType: dtype.Float32, In: [][]byte{b, b}, Out: [][]byte{b}}},
		{"reduce partial alias", Reduce, Args{DType: dtype.Float32, In: [][]byte{wide[:8]}, Out: [][]byte{wide[4:12]}}},
		{"root range", Reduce, Args{DType: dtype.Float32, Root: 2, In: [][]byte{b}, Out: [][]byte{b}}},
		{"negative root", Broadcast, Args{Root: -1, In: [][]byte{b}, Out: [][]byte{b}}},
		{"ag out count", AllGather, Args{In: [][]byte{b}, Out: [][]byte{b}}},
		{"ag own len", AllGather, Args{In: [][]byte{b}, Out: [][]byte{b[:4], b}}},
		{"a2a self len", AllToAll, Args{In: [][]byte{b, b}, Out: [][]byte{b[:4], b}}},
		{"gather out count", Gather, Args{In: [][]byte{b}, Out: [][]byte{b}}},
		{"scatter in count", Scatter, Args{In: [][]byte{b}, Out: [][]byte{b}}},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := tc.f(ctx, c, tc.a)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: not rejected: %v", tc.name, err)
		}
	}
	if err := w.Leftovers(); err != nil {
		t.Fatalf("a rejected call sent messages: %v", err)
	}
}

// A single rank needs no Conn traffic at all.
func TestSingleRankNoTraffic(t *testing.T) {
	for _, oc := range opCases(100) {
		w := conntest.NewWorld(1)
		w.Fail = func(int, int, uint32, bool) error { return errors.New("single rank must not communicate") }
		mustOK(t, w, runOp(t, w, oc.f, oc.mk(1)))
	}
}
