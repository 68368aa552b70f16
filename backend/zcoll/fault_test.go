package zcoll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
	"github.com/zipccl/zipccl/backend/reduce"
)

// opSpec builds valid arguments for one operation on n ranks and checks
// the outputs of the ranks that succeeded.
type opSpec struct {
	name string
	f    opFunc
	// mk returns the per-rank args and a check of rank r's output.
	mk func(n int, p Plan) ([]Args, func(t *testing.T, r int))
}

func opSpecs(numel int, dt dtype.DType) []opSpec {
	es := dt.Size()
	rng := rand.New(rand.NewPCG(9, uint64(numel)))
	data := func(m int) []byte { return genData(rng, dt, m, gaussian) }
	return []opSpec{
		{"allreduce", AllReduce, func(n int, p Plan) ([]Args, func(*testing.T, int)) {
			xs, outs := make([][]byte, n), make([][]byte, n)
			as := make([]Args, n)
			for r := range as {
				xs[r] = data(numel)
				outs[r] = clone(xs[r])
				as[r] = Args{Args: collective.Args{DType: dt, Op: reduce.Sum, In: [][]byte{outs[r]}, Out: [][]byte{outs[r]}}, Plan: p}
			}
			want := refReduce(dt, reduce.Sum, xs)
			return as, func(t *testing.T, r int) { sameBytes(t, "allreduce output", outs[r], want) }
		}},
		{"reducescatter", ReduceScatter, func(n int, p Plan) ([]Args, func(*testing.T, int)) {
			as := make([]Args, n)
			xs := make([][][]byte, n)
			for r := range as {
				xs[r] = make([][]byte, n)
				for j := range xs[r] {
					xs[r][j] = data(numel)
				}
				as[r] = Args{Args: collective.Args{DType: dt, Op: reduce.Sum, In: xs[r], Out: [][]byte{make([]byte, numel*es)}}, Plan: p}
			}
			return as, func(t *testing.T, r int) {
				parts := make([][]byte, n)
				for q := range parts {
					parts[q] = xs[q][r]
				}
				sameBytes(t, "reducescatter output", as[r].Out[0], refReduce(dt, reduce.Sum, parts))
			}
		}},
		{"allgather", AllGather, func(n int, p Plan) ([]Args, func(*testing.T, int)) {
			as := make([]Args, n)
			shards := make([][]byte, n)
			for r := range shards {
				shards[r] = data(numel)
			}
			for r := range as {
				out := make([][]byte, n)
				for j := range out {
					out[j] = make([]byte, numel*es)
				}
				as[r] = Args{Args: collective.Args{DType: dt, In: [][]byte{shards[r]}, Out: out}, Plan: p}
			}
			return as, func(t *testing.T, r int) {
				for j := range n {
					sameBytes(t, "allgather output", as[r].Out[j], shards[j])
				}
			}
		}},
		{"alltoall", AllToAll, func(n int, p Plan) ([]Args, func(*testing.T, int)) {
			as := make([]Args, n)
			xs := make([][][]byte, n)
			for r := range as {
				xs[r] = make([][]byte, n)
				out := make([][]byte, n)
				for j := range xs[r] {
					xs[r][j] = data(numel)
					out[j] = make([]byte, numel*es)
				}
				as[r] = Args{Args: collective.Args{DType: dt, In: xs[r], Out: out}, Plan: p}
			}
			return as, func(t *testing.T, r int) {
				for j := range n {
					sameBytes(t, "alltoall output", as[r].Out[j], xs[j][r])
				}
			}
		}},
		{"broadcast", Broadcast, func(n int, p Plan) ([]Args, func(*testing.T, int)) {
			as := make([]Args, n)
			src := data(numel)
			root := 1 % n
			for r := range as {
				b := make([]byte, numel*es)
				if r == root {
					copy(b, src)
				}
				as[r] = Args{Args: collective.Args{DType: dt, Root: root, In: [][]byte{b}, Out: [][]byte{b}}, Plan: p}
			}
			return as, func(t *testing.T, r int) { sameBytes(t, "broadcast output", as[r].Out[0], src) }
		}},
	}
}

var faultPlans = []namedPlan{
	{"plain", Plan{Segment: 256}},
	{"zip3", Plan{Framed: true, Kind: codec.Zip3, Segment: 256}},
	{"huff/d2", Plan{Framed: true, Kind: codec.Huff, Segment: 256, A2ADesign: 2}},
	{"auto/d2", Plan{Framed: true, Kind: codec.Auto, Segment: 256, A2ADesign: 2}},
	{"raw", Plan{Framed: true, Kind: codec.Raw, Segment: 256}},
}

var errInjected = errors.New("injected failure")

// (5) A Conn failing on one call (as a broken connection would, aborting
// the group) makes the failing rank return that error, wrapped with what
// failed; every other rank returns promptly, with an error unless it had
// already finished (and then with the right output); nothing leaks.
func TestFailure(t *testing.T) {
	ats := []int{0, 1, 7, 40}
	if testing.Short() {
		ats = []int{0, 7}
	}
	for _, spec := range opSpecs(1001, dtype.BFloat16) {
		for _, p := range faultPlans {
			for _, n := range []int{2, 3, 5} {
				for _, send := range []bool{true, false} {
					for _, at := range ats {
						victim := n / 2
						name := fmt.Sprintf("%s/%s/n%d/send=%v/at%d", spec.name, p.name, n, send, at)
						var calls atomic.Int64
						w := conntest.NewWorld(n)
						w.Fail = func(src, dst int, slot uint32, s bool) error {
							if src == victim && s == send && calls.Add(1)-1 == int64(at) {
								return fmt.Errorf("%w (rank %d)", errInjected, src)
							}
							return nil
						}
						args, check := spec.mk(n, p.p)
						errs := runWorld(t, w, spec.f, args, runOpts{})
						if calls.Load() <= int64(at) {
							mustOK(t, w, errs) // the victim made fewer calls
							continue
						}
						verr := errs[victim]
						if !errors.Is(verr, errInjected) {
							t.Fatalf("%s: victim returned %v, want the injected error", name, verr)
						}
						var ce *collective.Error
						if !errors.As(verr, &ce) || ce.Op != spec.name || !strings.Contains(verr.Error(), spec.name) {
							t.Fatalf("%s: victim error %q does not say what failed", name, verr)
						}
						for r, err := range errs {
							switch {
							case err == nil:
								check(t, r)
							case !errors.Is(err, errInjected) && !errors.Is(err, conntest.ErrAborted):
								t.Fatalf("%s: rank %d: unexpected error %v", name, r, err)
							}
						}
					}
				}
			}
		}
	}
}

// A cancelled context stops every rank promptly with the context's error.
func TestCancel(t *testing.T) {
	for _, spec := range opSpecs(4000, dtype.Float32) {
		for _, p := range faultPlans {
			n := 3
			w := conntest.NewWorld(n)
			w.Jitter = 200 * time.Microsecond
			args, _ := spec.mk(n, p.p)
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			before := goroutines()
			conns := w.Conns()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() { errs[r] = spec.f(ctx, conns[r], args[r]) })
			}
			wg.Wait()
			cancel()
			checkGoroutines(t, before)
			for r, err := range errs {
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s/%s rank %d: %v", spec.name, p.name, r, err)
				}
			}
		}
	}
}

// (6) A byte flipped in transit (or a message cut short or extended) in a
// framed operation is reported as a *CorruptError by the rank that
// decodes it, never turned into a wrong tensor: every rank that returns
// nil has the right output. (The failing rank's group is aborted, as the
// engine breaks the group on an error, so the others return.)
func TestCorruption(t *testing.T) {
	mutations := []struct {
		name string
		f    func(rng *rand.Rand, msg []byte) []byte
	}{
		{"flip", func(rng *rand.Rand, msg []byte) []byte {
			if len(msg) > 0 {
				msg[rng.IntN(len(msg))] ^= byte(1 << rng.IntN(8))
			}
			return msg
		}},
		{"short", func(rng *rand.Rand, msg []byte) []byte { return msg[:len(msg)-1-rng.IntN(min(len(msg), 200))] }},
		{"long", func(rng *rand.Rand, msg []byte) []byte { return append(msg[:len(msg):len(msg)], 0) }},
	}
	for _, spec := range opSpecs(700, dtype.BFloat16) {
		for _, p := range faultPlans[1:] { // plain mode has nothing to check
			for _, n := range []int{2, 3, 4} {
				for _, mu := range mutations {
					for _, at := range []int{0, 3} {
						name := fmt.Sprintf("%s/%s/n%d/%s/at%d", spec.name, p.name, n, mu.name, at)
						var calls atomic.Int64
						rng := rand.New(rand.NewPCG(uint64(n), uint64(at)))
						var hit atomic.Bool
						w := conntest.NewWorld(n)
						var mu2 sync.Mutex
						w.Corrupt = func(src, dst int, slot uint32, m []byte) []byte {
							if src == 0 && calls.Add(1)-1 == int64(at) && len(m) > 0 {
								hit.Store(true)
								mu2.Lock()
								defer mu2.Unlock()
								return mu.f(rng, m)
							}
							return m
						}
						args, check := spec.mk(n, p.p)
						errs := runWorld(t, w, spec.f, args, runOpts{abortOnError: true})
						if !hit.Load() {
							continue
						}
						corrupted := false
						for r, err := range errs {
							var ce *CorruptError
							var me *conntest.MismatchError
							switch {
							case err == nil:
								check(t, r)
							case errors.As(err, &ce), errors.As(err, &me): // detected by the decoder or by the transport's length check
								corrupted = true
							case !errors.Is(err, conntest.ErrAborted):
								t.Fatalf("%s: rank %d: unexpected error %v", name, r, err)
							}
						}
						if !corrupted {
							t.Fatalf("%s: corruption not reported: %v", name, errs)
						}
					}
				}
			}
		}
	}
}

// One bad exchange of an all-to-all (a corrupt frame from rank 0 to rank
// 1) fails rank 1's operation but not the other exchanges: every other
// block arrives intact, every other rank succeeds.
func TestAllToAllIndependent(t *testing.T) {
	for _, p := range faultPlans[1:] {
		n := 4
		spec := opSpecs(2000, dtype.Float16)[3]
		w := conntest.NewWorld(n)
		w.Corrupt = func(src, dst int, slot uint32, m []byte) []byte {
			if src == 0 && dst == 1 && slot == collective.Slot(0, 2) {
				m[len(m)/2] ^= 0x10
			}
			return m
		}
		args, _ := spec.mk(n, p.p)
		errs := runWorld(t, w, spec.f, args, runOpts{})
		var ce *CorruptError
		if !errors.As(errs[1], &ce) || !workgroup.PairLocal(errs[1]) {
			t.Fatalf("%s: rank 1 returned %v, want a pair-local corrupt error", p.name, errs[1])
		}
		var cerr *collective.Error
		if !errors.As(errs[1], &cerr) || cerr.Peer != 0 || cerr.Action != "recv" {
			t.Fatalf("%s: rank 1's error %v does not name the exchange", p.name, errs[1])
		}
		for r, err := range errs {
			if r != 1 && err != nil {
				t.Fatalf("%s: rank %d: %v", p.name, r, err)
			}
		}
		for r := range n {
			for j := range n {
				if r == 1 && j == 0 {
					continue
				}
				sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", p.name, r, j), args[r].Out[j], args[j].In[r])
			}
		}
	}
}

func goroutines() int { return runtime.NumGoroutine() }

// Invalid arguments are rejected before anything is sent.
func TestInvalid(t *testing.T) {
	buf := make([]byte, 16)
	bad := []struct {
		name string
		f    opFunc
		a    Args
	}{
		{"kind", AllReduce, Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{buf}, Out: [][]byte{buf}}, Plan: Plan{Framed: true, Kind: 7}}},
		{"design", AllToAll, Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{buf, buf}, Out: [][]byte{buf, buf}}, Plan: Plan{A2ADesign: 3}}},
		{"segment", AllGather, Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{buf}, Out: [][]byte{buf, buf}}, Plan: Plan{Segment: -1}}},
		{"avg", AllReduce, Args{Args: collective.Args{DType: dtype.Float32, Op: reduce.Avg, In: [][]byte{buf}, Out: [][]byte{buf}}}},
		{"band float", ReduceScatter, Args{Args: collective.Args{DType: dtype.Float32, Op: reduce.BAnd, In: [][]byte{buf, buf}, Out: [][]byte{make([]byte, 16)}}}},
		{"partial elements", AllToAll, Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{buf, buf[:3]}, Out: [][]byte{buf, buf[:3]}}, Plan: Plan{Framed: true}}},
		{"overlap", ReduceScatter, Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{buf[:8], buf[8:]}, Out: [][]byte{buf[4:12]}}}},
		{"lengths", AllReduce, Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{buf}, Out: [][]byte{buf[:8]}}}},
		{"root", Broadcast, Args{Args: collective.Args{DType: dtype.Float32, Root: 2, In: [][]byte{buf}, Out: [][]byte{buf}}}},
		{"dtype", Broadcast, Args{Args: collective.Args{In: [][]byte{buf}, Out: [][]byte{buf}}, Plan: Plan{Framed: true}}},
	}
	for _, b := range bad {
		w := conntest.NewWorld(2)
		err := b.f(context.Background(), w.Conns()[0], b.a)
		if err == nil || !strings.HasPrefix(err.Error(), "zcoll: ") {
			t.Errorf("%s: got %v, want a zcoll error", b.name, err)
		}
		if w.Messages() != 0 {
			t.Errorf("%s: sent messages", b.name)
		}
	}
}

// (7) The split receiver copes with the dynamic part arriving before the
// static part, even on a transport that does not buffer (a send waits for
// its receive): both receives of a segment must be posted together.
func TestSplitOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, kind := range []codec.Kind{codec.Zip3, codec.Huff, codec.Raw, codec.Auto} {
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float8E5M2, dtype.Int16} {
			for _, dynFirst := range []bool{false, true} {
				name := fmt.Sprintf("%v/%v/dynFirst=%v", kind, dt, dynFirst)
				src := genData(rng, dt, 3000, specials)
				dst := make([]byte, len(src))
				w := conntest.NewWorld(2)
				w.Rendezvous = true
				cs := w.Conns()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var held []byte
				var heldSlot uint32
				var serr, rerr error
				var wg sync.WaitGroup
				wg.Go(func() {
					serr = SendSplit(ctx, func(slot uint32, bufs ...[]byte) error {
						if !dynFirst {
							return cs[0].Send(ctx, 1, slot, bufs...)
						}
						if slot>>16 == stepStatic { // hold the static part until the dynamic one is through
							held, heldSlot = bytes.Clone(bytes.Join(bufs, nil)), slot
							return nil
						}
						if err := cs[0].Send(ctx, 1, slot, bufs...); err != nil {
							return err
						}
						return cs[0].Send(ctx, 1, heldSlot, held)
					}, src, dt, kind, 500, HostCoder(nil), nil)
				})
				wg.Go(func() {
					rerr = RecvSplit(ctx, func(slot uint32, buf []byte) (int, error) {
						return cs[1].RecvUpTo(ctx, 0, slot, buf)
					}, dst, dt, kind, 500, HostCoder(nil), nil)
				})
				wg.Wait()
				cancel()
				if serr != nil || rerr != nil {
					t.Fatalf("%s: send %v, recv %v", name, serr, rerr)
				}
				sameBytes(t, name, dst, src)
				if err := w.Leftovers(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// reorderConn delays every static part (step 0) until the dynamic part of
// the same segment (step 1) has been sent to the same peer.
type reorderConn struct {
	collective.VarConn
	mu   sync.Mutex
	held map[[2]int][]byte
}

func (c *reorderConn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	k := [2]int{peer, int(slot & 0xffff)}
	if slot>>16 == 0 {
		c.mu.Lock()
		c.held[k] = bytes.Join(bufs, nil)
		c.mu.Unlock()
		return nil
	}
	if err := c.VarConn.Send(ctx, peer, slot, bufs...); err != nil {
		return err
	}
	c.mu.Lock()
	h := c.held[k]
	delete(c.held, k)
	c.mu.Unlock()
	return c.VarConn.Send(ctx, peer, slot&0xffff, h)
}

// Broadcast's chain in split mode, the root sending every dynamic part
// first, over a transport without buffering.
func TestBroadcastSplitOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, kind := range []codec.Kind{codec.Zip3, codec.Huff, codec.Auto} {
		for _, n := range []int{2, 4} {
			src := genData(rng, dtype.BFloat16, 5000, gaussian)
			w := conntest.NewWorld(n)
			w.Rendezvous = true
			cs := w.Conns()
			outs := make([][]byte, n)
			errs := make([]error, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var wg sync.WaitGroup
			for r := range n {
				outs[r] = make([]byte, len(src))
				if r == 0 {
					copy(outs[r], src)
				}
				var c collective.VarConn = cs[r]
				if r == 0 { // the root sends every dynamic part first; the hops forward in arrival order
					c = &reorderConn{VarConn: cs[r], held: map[[2]int][]byte{}}
				}
				wg.Go(func() {
					errs[r] = Broadcast(ctx, c, Args{Args: collective.Args{DType: dtype.BFloat16, In: [][]byte{outs[r]}, Out: [][]byte{outs[r]}},
						Plan: Plan{Framed: true, Kind: kind, Segment: 1000}})
				})
			}
			wg.Wait()
			cancel()
			for r := range n {
				if errs[r] != nil {
					t.Fatalf("%v n%d rank %d: %v", kind, n, r, errs[r])
				}
				sameBytes(t, fmt.Sprintf("%v n%d rank %d", kind, n, r), outs[r], src)
			}
		}
	}
}

// The hierarchical all-to-all under a failing connection, as TestFailure:
// a rank inside a host, or every rank of a host, failing on one call fails
// every other rank promptly (runWorld catches a hang); a rank that finished
// first has the right blocks; nothing leaks.
func TestHierAllToAllFailure(t *testing.T) {
	h := Hosts{{0, 1, 2}, {3, 4, 5}}
	n := 6
	ats := []int{0, 1, 7, 40}
	if testing.Short() {
		ats = []int{0, 7}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([][][]byte, n)
	for r := range xs {
		xs[r] = make([][]byte, n)
		for j := range xs[r] {
			xs[r][j] = genData(rng, dtype.BFloat16, hierSplit(400, r, j), gaussian)
		}
	}
	hier := func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllToAll(ctx, c, a, h) }
	for _, p := range faultPlans {
		for _, victims := range [][]int{{4}, {0}, {3, 4, 5}} { // a rank, a host's first rank, a host
			for _, send := range []bool{true, false} {
				for _, at := range ats {
					name := fmt.Sprintf("%s/victims%v/send=%v/at%d", p.name, victims, send, at)
					var calls atomic.Int64
					w := conntest.NewWorld(n)
					w.Fail = func(src, dst int, slot uint32, s bool) error {
						if slices.Contains(victims, src) && s == send && calls.Add(1)-1 >= int64(at) {
							return fmt.Errorf("%w (rank %d)", errInjected, src)
						}
						return nil
					}
					args := make([]Args, n)
					for r := range n {
						ins, outs := make([][]byte, n), make([][]byte, n)
						for j := range n {
							ins[j], outs[j] = clone(xs[r][j]), make([]byte, len(xs[j][r]))
						}
						args[r] = Args{Args: collective.Args{DType: dtype.BFloat16, In: ins, Out: outs}, Plan: p.p}
					}
					errs := runWorld(t, w, hier, args, runOpts{})
					if calls.Load() <= int64(at) {
						mustOK(t, w, errs) // the victims made fewer calls
						continue
					}
					failed := false
					for r, err := range errs {
						switch {
						case err == nil:
							for j := range n {
								sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", name, r, j), args[r].Out[j], xs[j][r])
							}
						case errors.Is(err, errInjected):
							failed = true
							var ce *collective.Error
							if !slices.Contains(victims, r) || !errors.As(err, &ce) || ce.Op != "alltoall" {
								t.Fatalf("%s: rank %d: %v", name, r, err)
							}
						case !errors.Is(err, conntest.ErrAborted):
							t.Fatalf("%s: rank %d: unexpected error %v", name, r, err)
						}
					}
					if !failed {
						t.Fatalf("%s: no victim reported the injected error: %v", name, errs)
					}
				}
			}
		}
	}
}

// One corrupt frame on a rail fails that bundle's destination only, with a
// pair-local error: every other block arrives, every other rank succeeds
// (as TestAllToAllIndependent for the flat algorithm).
func TestHierAllToAllIndependent(t *testing.T) {
	h := Hosts{{0, 1}, {2, 3}}
	for _, p := range faultPlans[1:] {
		n := 4
		spec := opSpecs(2000, dtype.Float16)[3]
		w := conntest.NewWorld(n)
		w.Corrupt = func(src, dst int, slot uint32, m []byte) []byte {
			if src == 0 && dst == 2 && len(m) > 100 { // rank 0's bundle for rank 2
				m[len(m)/2] ^= 0x10
			}
			return m
		}
		args, _ := spec.mk(n, p.p)
		errs := runWorld(t, w, func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllToAll(ctx, c, a, h) }, args, runOpts{})
		var ce *CorruptError
		if !errors.As(errs[2], &ce) || !workgroup.PairLocal(errs[2]) {
			t.Fatalf("%s: rank 2 returned %v, want a pair-local corrupt error", p.name, errs[2])
		}
		for r, err := range errs {
			if r != 2 && err != nil {
				t.Fatalf("%s: rank %d: %v", p.name, r, err)
			}
		}
		for r := range n {
			for j := range n {
				if r == 2 && (j == 0 || j == 1) { // the bundle from host 0's rail 0
					continue
				}
				sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", p.name, r, j), args[r].Out[j], args[j].In[r])
			}
		}
	}
}

// Reduce-scatter and all-gather on hosts of unequal size under a failing
// connection: a spare, a rail rank, or the one rank of a host failing on
// one call fails every other rank promptly (runWorld catches a hang), the
// victims with the op named; a rank that finished first has the right
// result.
func TestHierUnequalFailure(t *testing.T) {
	h := Hosts{{0, 2, 3}, {1}}
	const n, numel = 4, 700
	rng := rand.New(rand.NewPCG(5, 6))
	xs := make([][][]byte, n) // xs[r][j]: rank r's block j
	for r := range xs {
		xs[r] = make([][]byte, n)
		for j := range xs[r] {
			xs[r][j] = genData(rng, dtype.Float32, numel, gaussian)
		}
	}
	ops := map[string]opFunc{
		"reducescatter": func(ctx context.Context, c collective.VarConn, a Args) error { return HierReduceScatter(ctx, c, a, h) },
		"allgather":     func(ctx context.Context, c collective.VarConn, a Args) error { return HierAllGather(ctx, c, a, h) },
	}
	for op, f := range ops {
		for _, victim := range []int{3, 0, 1} { // a spare, a rail rank, a host
			for _, send := range []bool{true, false} {
				for _, at := range []int{0, 1, 3} {
					name := fmt.Sprintf("%s/victim%d/send=%v/at%d", op, victim, send, at)
					var calls atomic.Int64
					w := conntest.NewWorld(n)
					w.Fail = func(src, dst int, slot uint32, s bool) error {
						if src == victim && s == send && calls.Add(1)-1 >= int64(at) {
							return fmt.Errorf("%w (rank %d)", errInjected, src)
						}
						return nil
					}
					args := make([]Args, n)
					for r := range n {
						if op == "allgather" {
							outs := make([][]byte, n)
							for j := range outs {
								outs[j] = make([]byte, len(xs[j][0]))
							}
							args[r] = Args{Args: collective.Args{DType: dtype.Float32, In: [][]byte{clone(xs[r][0])}, Out: outs}}
						} else {
							ins := make([][]byte, n)
							for j := range ins {
								ins[j] = clone(xs[r][j])
							}
							args[r] = Args{Args: collective.Args{DType: dtype.Float32, Op: reduce.Sum, In: ins, Out: [][]byte{make([]byte, len(xs[r][r]))}}}
						}
					}
					errs := runWorld(t, w, f, args, runOpts{})
					if calls.Load() <= int64(at) {
						mustOK(t, w, errs)
						continue
					}
					failed := false
					for r, err := range errs {
						switch {
						case err == nil:
							if op == "allgather" {
								for j := range n {
									sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", name, r, j), args[r].Out[j], xs[j][0])
								}
							} else {
								contrib := make([][]byte, n)
								for q := range n {
									contrib[q] = xs[q][r]
								}
								sameBytes(t, fmt.Sprintf("%s rank %d", name, r), args[r].Out[0], hierRef(dtype.Float32, reduce.Sum, h, contrib))
							}
						case errors.Is(err, errInjected):
							failed = true
							var ce *collective.Error
							if r != victim || !errors.As(err, &ce) || ce.Op != op {
								t.Fatalf("%s: rank %d: %v", name, r, err)
							}
						case !errors.Is(err, conntest.ErrAborted):
							t.Fatalf("%s: rank %d: unexpected error %v", name, r, err)
						}
					}
					if !failed {
						t.Fatalf("%s: no victim reported the injected error: %v", name, errs)
					}
				}
			}
		}
	}
}
