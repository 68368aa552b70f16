package comm

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/transport"
)

// rig runs a group of n communicators in this process, each on its own
// endpoint as if in its own process.
type rig struct {
	t      *testing.T
	comms  []*Comm
	eps    []*transport.Endpoint
	ticket atomic.Uint64
	mu     sync.Mutex
	done   map[uint64]chan result
}

type result struct {
	src int
	err error
}

func newRig(t *testing.T, n int, timeout time.Duration) *rig {
	return newRigWith(t, n, "test", timeout, func(int) map[string]string { return nil })
}

// newRigWith starts n communicators of group name on loopback, with each
// rank's options from opts; they are aborted when the test ends.
func newRigWith(t *testing.T, n int, name string, timeout time.Duration, opts func(rank int) map[string]string) *rig {
	return newRigConfig(t, n, func(rank int) Config {
		return Config{Name: name, Timeout: timeout, Options: opts(rank)}
	})
}

// newRigConfig starts n communicators with each rank's Config from cfg
// (its rank, size, store, endpoint and completion filled in).
func newRigConfig(t *testing.T, n int, cfg func(rank int) Config) *rig {
	t.Helper()
	r := &rig{t: t, done: map[uint64]chan result{}}
	store := rendezvous.NewMemStore()
	for i := 0; i < n; i++ {
		ep, err := transport.Listen("127.0.0.1")
		require.NoError(t, err)
		conf := cfg(i)
		conf.Rank, conf.Size, conf.Store, conf.Endpoint, conf.Complete = i, n, store, ep, r.complete
		c, err := New(conf)
		require.NoError(t, err)
		r.comms = append(r.comms, c)
		r.eps = append(r.eps, ep)
	}
	t.Cleanup(func() {
		for i, c := range r.comms {
			c.Abort("test over")
			r.eps[i].Close()
		}
	})
	return r
}

func (r *rig) complete(ticket uint64, src int, err error) {
	r.mu.Lock()
	ch := r.done[ticket]
	r.mu.Unlock()
	ch <- result{src, err}
}

// submit queues op on rank and returns a channel for its outcome.
func (r *rig) submit(rank int, op *Op) chan result {
	op.Ticket = r.ticket.Add(1)
	ch := make(chan result, 1)
	r.mu.Lock()
	r.done[op.Ticket] = ch
	r.mu.Unlock()
	if err := r.comms[rank].Submit(op); err != nil {
		ch <- result{-1, err}
	}
	return ch
}

func wait(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("op never completed")
	}
	return result{}
}

// everyRank runs mk(rank) on every rank at once and returns the outcomes.
func (r *rig) everyRank(mk func(rank int) *Op) []result {
	chans := make([]chan result, len(r.comms))
	for i := range r.comms {
		chans[i] = r.submit(i, mk(i))
	}
	out := make([]result, len(chans))
	for i, ch := range chans {
		out[i] = wait(r.t, ch)
	}
	return out
}

func f32s(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func f32at(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

func TestAllReduceSumAndAvg(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := newRig(t, n, 20*time.Second)
			for _, count := range []int{0, 1, 5, 1000, 300001} {
				bufs := make([][]byte, n)
				res := r.everyRank(func(rank int) *Op {
					vals := make([]float32, count)
					for i := range vals {
						vals[i] = float32(rank*7 + i%13)
					}
					bufs[rank] = f32s(vals...)
					return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
				})
				for rank, x := range res {
					require.NoError(t, x.err, "rank %d", rank)
				}
				for i := 0; i < count; i++ {
					want := float32(0)
					for rank := 0; rank < n; rank++ {
						want += float32(rank*7 + i%13)
					}
					for rank := 0; rank < n; rank++ {
						require.Equal(t, want, f32at(bufs[rank], i), "rank %d elem %d", rank, i)
					}
				}
			}
			// AVG divides the sum by the group size.
			bufs := make([][]byte, n)
			res := r.everyRank(func(rank int) *Op {
				bufs[rank] = f32s(float32(rank), 1)
				return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Avg, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
			})
			for rank, x := range res {
				require.NoError(t, x.err)
				require.Equal(t, float32(n-1)/2, f32at(bufs[rank], 0))
				require.Equal(t, float32(1), f32at(bufs[rank], 1))
			}
		})
	}
}

func TestPreMulSumKeepsInput(t *testing.T) {
	const n = 3
	r := newRig(t, n, 20*time.Second)
	ins := make([][][]byte, n)
	outs := make([][]byte, n)
	res := r.everyRank(func(rank int) *Op {
		ins[rank] = [][]byte{f32s(1, 2), f32s(3, 4), f32s(5, 6)}
		outs[rank] = make([]byte, 8)
		return &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.PreMulSum, PreMul: 0.5, In: ins[rank], Out: [][]byte{outs[rank]}}
	})
	for rank, x := range res {
		require.NoError(t, x.err)
		require.Equal(t, f32s(1, 2), ins[rank][0], "input must not be modified")
		want := float32(2*rank+1) * 0.5 * n
		require.Equal(t, want, f32at(outs[rank], 0))
	}
}

func TestBarrierAndRootedOps(t *testing.T) {
	const n = 4
	r := newRig(t, n, 20*time.Second)
	for _, x := range r.everyRank(func(int) *Op { return &Op{Kind: opkind.Barrier} }) {
		require.NoError(t, x.err)
	}
	bufs := make([][]byte, n)
	res := r.everyRank(func(rank int) *Op {
		bufs[rank] = f32s(float32(rank), float32(rank))
		return &Op{Kind: opkind.Broadcast, DType: dtype.Float32, Root: 2, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	})
	for rank, x := range res {
		require.NoError(t, x.err)
		require.Equal(t, f32s(2, 2), bufs[rank])
	}
	outs := make([][][]byte, n)
	res = r.everyRank(func(rank int) *Op {
		op := &Op{Kind: opkind.Gather, DType: dtype.Float32, Root: 1, In: [][]byte{f32s(float32(rank))}}
		if rank == 1 {
			outs[rank] = [][]byte{make([]byte, 4), make([]byte, 4), make([]byte, 4), make([]byte, 4)}
			op.Out = outs[rank]
		}
		return op
	})
	for _, x := range res {
		require.NoError(t, x.err)
	}
	for i := 0; i < n; i++ {
		require.Equal(t, float32(i), f32at(outs[1][i], 0))
	}
}

func TestAllToAllUneven(t *testing.T) {
	const n = 3
	r := newRig(t, n, 20*time.Second)
	outs := make([][][]byte, n)
	// rank i sends i+j+1 floats to rank j, each equal to 10*i+j.
	res := r.everyRank(func(i int) *Op {
		op := &Op{Kind: opkind.AllToAll, DType: dtype.Float32}
		for j := 0; j < n; j++ {
			vals := make([]float32, i+j+1)
			for k := range vals {
				vals[k] = float32(10*i + j)
			}
			op.In = append(op.In, f32s(vals...))
			op.Out = append(op.Out, make([]byte, 4*(i+j+1)))
		}
		outs[i] = op.Out
		return op
	})
	for i, x := range res {
		require.NoError(t, x.err)
		for j := 0; j < n; j++ {
			for k := 0; k < i+j+1; k++ {
				require.Equal(t, float32(10*j+i), f32at(outs[i][j], k))
			}
		}
	}
}

func requireAllFail(t *testing.T, res []result, code Code, parts ...string) {
	t.Helper()
	for rank, x := range res {
		require.Error(t, x.err, "rank %d must fail", rank)
		require.Equal(t, code, CodeOf(x.err), "rank %d: %v", rank, x.err)
		for _, p := range parts {
			require.Contains(t, x.err.Error(), p, "rank %d", rank)
		}
	}
}

func TestMismatchFailsEveryRankAndGroupStaysUsable(t *testing.T) {
	const n = 4
	r := newRig(t, n, 20*time.Second)
	// Rank 2 all-reduces fewer elements.
	res := r.everyRank(func(rank int) *Op {
		count := 1024
		if rank == 2 {
			count = 512
		}
		b := make([]byte, 4*count)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}
	})
	requireAllFail(t, res, CodeMismatch, "1024 elements", "512 elements", "rank 2")

	// Rank 1 calls a different op and a different root.
	res = r.everyRank(func(rank int) *Op {
		b := make([]byte, 64)
		if rank == 1 {
			return &Op{Kind: opkind.Gather, DType: dtype.Float32, Root: 1, In: [][]byte{b}, Out: [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}}
		}
		return &Op{Kind: opkind.Broadcast, DType: dtype.Float32, Root: 0, In: [][]byte{b}, Out: [][]byte{b}}
	})
	requireAllFail(t, res, CodeMismatch, "gather", "broadcast")

	// dtype differs on one rank.
	res = r.everyRank(func(rank int) *Op {
		dt := dtype.Float32
		if rank == 3 {
			dt = dtype.Int32
		}
		b := make([]byte, 64)
		return &Op{Kind: opkind.AllReduce, DType: dt, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}
	})
	requireAllFail(t, res, CodeMismatch, "int32", "float32")

	// The group still works.
	bufs := make([][]byte, n)
	res = r.everyRank(func(rank int) *Op {
		bufs[rank] = f32s(1, 2, 3)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	})
	for rank, x := range res {
		require.NoError(t, x.err)
		require.Equal(t, f32s(4, 8, 12), bufs[rank])
	}
}

func TestInvalidOpsAreRejectedBeforeSending(t *testing.T) {
	r := newRig(t, 2, 20*time.Second)
	b := make([]byte, 8)
	cases := []struct {
		op   *Op
		want string
	}{
		{&Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.BAnd, In: [][]byte{b}, Out: [][]byte{b}}, "BAND"},
		{&Op{Kind: opkind.AllReduce, DType: dtype.Bool, ReduceOp: reduce.Avg, In: [][]byte{b}, Out: [][]byte{b}}, "AVG"},
		{&Op{Kind: opkind.AllReduce, DType: dtype.DType(99), ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}, "dtype"},
		{&Op{Kind: opkind.Broadcast, DType: dtype.Float32, Root: 5, In: [][]byte{b}, Out: [][]byte{b}}, "root rank 5"},
		{&Op{Kind: opkind.Send, DType: dtype.Float32, Root: 0, In: [][]byte{b}}, "invalid destination"},
		{&Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, In: [][]byte{b}, Out: [][]byte{b}}, "expected 2 input"},
	}
	for _, c := range cases {
		err := r.comms[0].Submit(c.op)
		require.Error(t, err)
		require.Equal(t, CodeInvalid, CodeOf(err))
		require.Contains(t, err.Error(), c.want)
	}
	require.Empty(t, r.comms[0].mesh.Connected(), "nothing may be sent for a rejected op")
}

// failingStore refuses to store keys under prefix.
type failingStore struct {
	*rendezvous.MemStore
	prefix string
}

func (s failingStore) Set(key string, val []byte) error {
	if strings.HasPrefix(key, s.prefix) {
		return fmt.Errorf("store refused %s", key)
	}
	return s.MemStore.Set(key, val)
}

// A rank whose address or host cannot be published fails at creation,
// rather than leaving its peers to wait for it until the timeout.
func TestPublishFailureFailsNew(t *testing.T) {
	for _, prefix := range []string{"zipccl/addr/", "zipccl/host/"} {
		ep, err := transport.Listen("127.0.0.1")
		require.NoError(t, err)
		_, err = New(Config{Name: "test", Rank: 1, Size: 2, Timeout: 5 * time.Second,
			Store: failingStore{rendezvous.NewMemStore(), prefix}, Endpoint: ep})
		ep.Close()
		require.ErrorContains(t, err, "store refused "+prefix+"1", prefix)
	}
}

func TestSendRecvTagsOrderAndAnySource(t *testing.T) {
	r := newRig(t, 3, 20*time.Second)
	// Two messages with the same tag arrive in order; another tag is
	// matched independently.
	a, b, c := make([]byte, 4), make([]byte, 4), make([]byte, 4)
	ra := r.submit(0, &Op{Kind: opkind.Recv, DType: dtype.Float32, Root: 2, Tag: 5, Out: [][]byte{a}})
	rb := r.submit(0, &Op{Kind: opkind.Recv, DType: dtype.Float32, Root: 2, Tag: 5, Out: [][]byte{b}})
	rc := r.submit(0, &Op{Kind: opkind.Recv, DType: dtype.Float32, Root: 2, Tag: 6, Out: [][]byte{c}})
	s3 := r.submit(2, &Op{Kind: opkind.Send, DType: dtype.Float32, Root: 0, Tag: 6, In: [][]byte{f32s(3)}})
	s1 := r.submit(2, &Op{Kind: opkind.Send, DType: dtype.Float32, Root: 0, Tag: 5, In: [][]byte{f32s(1)}})
	s2 := r.submit(2, &Op{Kind: opkind.Send, DType: dtype.Float32, Root: 0, Tag: 5, In: [][]byte{f32s(2)}})
	for _, ch := range []chan result{ra, rb, rc, s1, s2, s3} {
		require.NoError(t, wait(t, ch).err)
	}
	require.Equal(t, f32s(1), a)
	require.Equal(t, f32s(2), b)
	require.Equal(t, f32s(3), c)

	// Any source: rank 1 (higher than nobody here... rank 2 receives from rank 0, a lower rank).
	d := make([]byte, 4)
	rd := r.submit(2, &Op{Kind: opkind.Recv, DType: dtype.Float32, Root: -1, Tag: 1, Out: [][]byte{d}})
	require.NoError(t, wait(t, r.submit(0, &Op{Kind: opkind.Send, DType: dtype.Float32, Root: 2, Tag: 1, In: [][]byte{f32s(9)}})).err)
	res := wait(t, rd)
	require.NoError(t, res.err)
	require.Equal(t, 0, res.src)
	require.Equal(t, f32s(9), d)

	// A receive buffer of the wrong size is an error naming both sizes.
	e := make([]byte, 8)
	re := r.submit(1, &Op{Kind: opkind.Recv, DType: dtype.Float32, Root: 0, Tag: 2, Out: [][]byte{e}})
	require.NoError(t, wait(t, r.submit(0, &Op{Kind: opkind.Send, DType: dtype.Float32, Root: 1, Tag: 2, In: [][]byte{f32s(1)}})).err)
	err := wait(t, re).err
	require.Error(t, err)
	require.Contains(t, err.Error(), "4 bytes")
	require.Contains(t, err.Error(), "8 bytes")
}

func TestTimeoutNamesOpAndBreaksGroup(t *testing.T) {
	const n = 3
	r := newRig(t, n, 20*time.Second)
	// Rank 2 never joins the all-reduce; the others time out.
	chans := make([]chan result, 2)
	for rank := 0; rank < 2; rank++ {
		b := make([]byte, 16)
		chans[rank] = r.submit(rank, &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Timeout: 300, In: [][]byte{b}, Out: [][]byte{b}})
	}
	start := time.Now()
	for rank, ch := range chans {
		err := wait(t, ch).err
		require.Error(t, err)
		// The first rank to time out tells the other, which may fail on
		// that report before its own deadline.
		require.Contains(t, []Code{CodeTimeout, CodeComm}, CodeOf(err), "rank %d: %v", rank, err)
		require.Contains(t, err.Error(), "all_reduce")
		// as torch's own tests match a timeout
		require.Regexp(t, " (Timed out|closed|timeout) ", err.Error())
	}
	require.Less(t, time.Since(start), 10*time.Second)
	b := make([]byte, 16)
	err := r.comms[0].Submit(&Op{Ticket: 999, Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}})
	require.Error(t, err)
	require.Equal(t, CodeComm, CodeOf(err))
}

func TestPeerCrashFailsSurvivorsPromptly(t *testing.T) {
	const n = 4
	r := newRig(t, n, 60*time.Second)
	// Warm up so every pair of the ring is connected.
	bufs := make([][]byte, n)
	for _, x := range r.everyRank(func(rank int) *Op {
		bufs[rank] = make([]byte, 1<<20)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	}) {
		require.NoError(t, x.err)
	}
	// Ranks 0, 1, 3 start an all-reduce; rank 2 "crashes": its sockets
	// close without a goodbye.
	chans := map[int]chan result{}
	for _, rank := range []int{0, 1, 3} {
		chans[rank] = r.submit(rank, &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}})
	}
	time.Sleep(50 * time.Millisecond)
	r.comms[2].mesh.Abort(fmt.Errorf("simulated crash"))
	start := time.Now()
	for rank, ch := range chans {
		err := wait(t, ch).err
		require.Error(t, err, "rank %d", rank)
		require.Contains(t, err.Error(), "rank 2", "rank %d: %v", rank, err)
		require.True(t, strings.Contains(err.Error(), "lost"), "rank %d: %v", rank, err)
	}
	require.Less(t, time.Since(start), 10*time.Second, "survivors must not wait for the 60s timeout")
	// Later ops fail at once.
	b := make([]byte, 4)
	err := r.comms[0].Submit(&Op{Ticket: 1000, Kind: opkind.Barrier})
	_ = b
	require.Error(t, err)
	require.Contains(t, err.Error(), "rank 2")
}

// A block's size is known only to its two ends; the status fold after the
// exchange makes every rank fail with the receiver's message.
func TestAllToAllInconsistentSplitsFailEveryRank(t *testing.T) {
	const n = 3
	r := newRig(t, n, 20*time.Second)
	res := r.everyRank(func(i int) *Op {
		op := &Op{Kind: opkind.AllToAll, DType: dtype.Float32}
		for j := 0; j < n; j++ {
			send, recv := 2, 2
			if i == 1 && j == 0 {
				send = 3 // rank 0 expects 2 from rank 1
			}
			op.In = append(op.In, make([]byte, 4*send))
			op.Out = append(op.Out, make([]byte, 4*recv))
		}
		return op
	})
	for i, x := range res {
		require.Error(t, x.err, "rank %d", i)
		require.Contains(t, x.err.Error(), "rank 1 sent 12 bytes where rank 0 expected 8 bytes", "rank %d", i)
		require.Equal(t, CodeMismatch, CodeOf(x.err), "rank %d", i)
	}
	// The group is still usable.
	for _, x := range r.everyRank(func(int) *Op { return &Op{Kind: opkind.Barrier} }) {
		require.NoError(t, x.err)
	}
}
