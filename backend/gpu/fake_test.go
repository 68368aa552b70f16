package gpu

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// A fake NCCL over host memory, for running the GPU path's logic (and, with
// the CPU emulation of the kernel library, the coded algorithms) without a
// GPU. "Device" pointers are host addresses. Calls execute when made (or at
// the end of their group), blocking until every rank of the communicator
// made the matching call: the same observable semantics as NCCL's stream
// order, minus the asynchrony.

// mem views n bytes at address p (kept alive by the test).
func mem(p uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}

// addr is the address of b's first byte.
func addr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

type fakeWorld struct {
	mu    sync.Mutex
	comms map[UniqueID]*fakeShared
	// initErr, when set, makes InitRank fail on this global rank.
	initErr map[int]error
}

func newFakeWorld() *fakeWorld {
	return &fakeWorld{comms: map[UniqueID]*fakeShared{}, initErr: map[int]error{}}
}

// fakeShared is one communicator, as every member sees it.
type fakeShared struct {
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	rounds  map[int]*fakeRound  // collective number -> its gathering
	mail    map[[2]int][][]byte // (src, dst) -> messages in order
	aborted bool
}

type fakeCall struct {
	kind       string
	send, recv uintptr
	count      int
	dt         ncclDataType
	op         ncclRedOp
	root       int
	premul     float64
	usePremul  bool
}

type fakeRound struct {
	calls []*fakeCall
	got   int
	done  bool
	err   error
}

func (w *fakeWorld) shared(id UniqueID, n int) *fakeShared {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.comms[id]
	if s == nil {
		s = &fakeShared{n: n, rounds: map[int]*fakeRound{}, mail: map[[2]int][][]byte{}}
		s.cond = sync.NewCond(&s.mu)
		w.comms[id] = s
	}
	return s
}

// fakeLib is one rank's NCCL (group state is per rank, as NCCL's is per
// thread).
type fakeLib struct {
	w       *fakeWorld
	global  int
	version int
	inGroup int
	pending []func() error // calls deferred to GroupEnd (sends first)
	sends   []func() error
	groups  int // GroupEnd calls, for tests
}

func (l *fakeLib) Version() int { return l.version }

func (l *fakeLib) UniqueID() (UniqueID, error) {
	var id UniqueID
	_, err := rand.Read(id[:])
	return id, err
}

func (l *fakeLib) InitRank(n int, id UniqueID, rank int) (ncclComm, error) {
	l.w.mu.Lock()
	err := l.w.initErr[l.global]
	l.w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &fakeComm{lib: l, sh: l.w.shared(id, n), rank: rank}, nil
}

func (l *fakeLib) GroupStart() error {
	l.inGroup++
	return nil
}

func (l *fakeLib) GroupEnd() error {
	if l.inGroup == 0 {
		return errors.New("fake NCCL: GroupEnd without GroupStart")
	}
	l.inGroup--
	if l.inGroup > 0 {
		return nil
	}
	l.groups++
	sends, pending := l.sends, l.pending
	l.sends, l.pending = nil, nil
	var first error
	for _, f := range append(sends, pending...) {
		if err := f(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

type fakeComm struct {
	lib      *fakeLib
	sh       *fakeShared
	rank     int
	seq      int
	mu       sync.Mutex // asyncErr, aborts, destroys (the watcher reads them)
	asyncErr error
	aborts   int
	destroys int
	premuls  map[ncclRedOp]float64
	nextOp   ncclRedOp
}

func (c *fakeComm) Settle(time.Time) error { return nil }

func (c *fakeComm) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncErr
}

func (c *fakeComm) setAsyncError(err error) {
	c.mu.Lock()
	c.asyncErr = err
	c.mu.Unlock()
}

func (c *fakeComm) abortCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aborts
}

func (c *fakeComm) Abort() error {
	c.mu.Lock()
	c.aborts++
	c.mu.Unlock()
	c.sh.mu.Lock()
	c.sh.aborted = true
	c.sh.cond.Broadcast()
	c.sh.mu.Unlock()
	return nil
}

func (c *fakeComm) Destroy() error {
	c.mu.Lock()
	c.destroys++
	c.mu.Unlock()
	return nil
}

func (c *fakeComm) PreMulSum(scalar []byte, dt ncclDataType) (ncclRedOp, error) {
	if c.premuls == nil {
		c.premuls = map[ncclRedOp]float64{}
		c.nextOp = 100
	}
	var f float64
	switch dt {
	case ncclFloat64:
		f = math.Float64frombits(binary.LittleEndian.Uint64(scalar))
	case ncclFloat32:
		f = float64(math.Float32frombits(binary.LittleEndian.Uint32(scalar)))
	case ncclFloat16:
		f = float64(dtype.F16ToF32(binary.LittleEndian.Uint16(scalar)))
	case ncclBfloat16:
		f = float64(dtype.BF16ToF32(binary.LittleEndian.Uint16(scalar)))
	default:
		return 0, fmt.Errorf("fake NCCL: premul on type %d", dt)
	}
	op := c.nextOp
	c.nextOp++
	c.premuls[op] = f
	return op, nil
}

func (c *fakeComm) DestroyOp(op ncclRedOp) { delete(c.premuls, op) }

// run executes f now, or at the end of the open group.
func (c *fakeComm) run(f func() error) error {
	if c.lib.inGroup > 0 {
		c.lib.pending = append(c.lib.pending, f)
		return nil
	}
	return f()
}

func (c *fakeComm) collective(call *fakeCall) error {
	if call.op >= 100 {
		f, ok := c.premuls[call.op]
		if !ok {
			return errors.New("fake NCCL: unknown premul op (destroyed too early?)")
		}
		call.premul, call.usePremul = f, true
	}
	seq := c.seq
	c.seq++
	return c.run(func() error { return c.sh.gather(seq, c.rank, call) })
}

// gather blocks until every member made collective number seq; the last
// one executes it.
func (s *fakeShared) gather(seq, rank int, call *fakeCall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rounds[seq]
	if r == nil {
		r = &fakeRound{calls: make([]*fakeCall, s.n)}
		s.rounds[seq] = r
	}
	r.calls[rank] = call
	r.got++
	if r.got == s.n {
		r.err = execute(r.calls)
		r.done = true
		s.cond.Broadcast()
	}
	for !r.done && !s.aborted {
		s.cond.Wait()
	}
	if !r.done {
		return errors.New("fake NCCL: communicator aborted")
	}
	return r.err
}

func (c *fakeComm) AllReduce(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, stream uintptr) error {
	return c.collective(&fakeCall{kind: "allreduce", send: send, recv: recv, count: count, dt: dt, op: op})
}

func (c *fakeComm) Broadcast(send, recv uintptr, count int, dt ncclDataType, root int, stream uintptr) error {
	return c.collective(&fakeCall{kind: "broadcast", send: send, recv: recv, count: count, dt: dt, root: root})
}

func (c *fakeComm) Reduce(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, root int, stream uintptr) error {
	return c.collective(&fakeCall{kind: "reduce", send: send, recv: recv, count: count, dt: dt, op: op, root: root})
}

func (c *fakeComm) AllGather(send, recv uintptr, count int, dt ncclDataType, stream uintptr) error {
	return c.collective(&fakeCall{kind: "allgather", send: send, recv: recv, count: count, dt: dt})
}

func (c *fakeComm) ReduceScatter(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, stream uintptr) error {
	return c.collective(&fakeCall{kind: "reducescatter", send: send, recv: recv, count: count, dt: dt, op: op})
}

func (c *fakeComm) Send(buf uintptr, count int, dt ncclDataType, peer int, stream uintptr) error {
	size := fakeSize(dt)
	f := func() error {
		msg := append([]byte(nil), mem(buf, count*size)...)
		c.sh.mu.Lock()
		k := [2]int{c.rank, peer}
		c.sh.mail[k] = append(c.sh.mail[k], msg)
		c.sh.cond.Broadcast()
		c.sh.mu.Unlock()
		return nil
	}
	if c.lib.inGroup > 0 {
		c.lib.sends = append(c.lib.sends, f)
		return nil
	}
	return f()
}

func (c *fakeComm) Recv(buf uintptr, count int, dt ncclDataType, peer int, stream uintptr) error {
	size := fakeSize(dt)
	return c.run(func() error {
		c.sh.mu.Lock()
		defer c.sh.mu.Unlock()
		k := [2]int{peer, c.rank}
		for len(c.sh.mail[k]) == 0 && !c.sh.aborted {
			c.sh.cond.Wait()
		}
		if len(c.sh.mail[k]) == 0 {
			return errors.New("fake NCCL: communicator aborted")
		}
		msg := c.sh.mail[k][0]
		c.sh.mail[k] = c.sh.mail[k][1:]
		if len(msg) != count*size {
			return fmt.Errorf("fake NCCL: rank %d sent %d bytes, rank %d receives %d", peer, len(msg), c.rank, count*size)
		}
		copy(mem(buf, len(msg)), msg)
		return nil
	})
}

func fakeSize(dt ncclDataType) int {
	switch dt {
	case ncclInt8, ncclUint8:
		return 1
	case ncclFloat16, ncclBfloat16:
		return 2
	case ncclInt32, ncclUint32, ncclFloat32:
		return 4
	}
	return 8
}

// Host arithmetic for the fake's reductions: values widened to float64
// (exact for the integer-valued test data) or int64.
func fakeGet(dt ncclDataType, b []byte, i int) float64 {
	switch dt {
	case ncclFloat32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case ncclFloat64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	case ncclFloat16:
		return float64(dtype.F16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case ncclBfloat16:
		return float64(dtype.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case ncclInt8:
		return float64(int8(b[i]))
	case ncclUint8:
		return float64(b[i])
	case ncclInt32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case ncclInt64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
	panic("fake NCCL: type")
}

func fakePut(dt ncclDataType, b []byte, i int, v float64) {
	switch dt {
	case ncclFloat32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case ncclFloat64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	case ncclFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToF16(float32(v)))
	case ncclBfloat16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToBF16(float32(v)))
	case ncclInt8:
		b[i] = byte(int8(v))
	case ncclUint8:
		b[i] = byte(v)
	case ncclInt32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
	case ncclInt64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	default:
		panic("fake NCCL: type")
	}
}

func isFloat(dt ncclDataType) bool {
	return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16
}

func fold(calls []*fakeCall, count int, src func(r int) []byte) []float64 {
	dt, op := calls[0].dt, calls[0].op
	out := make([]float64, count)
	for i := 0; i < count; i++ {
		var acc float64
		for r, c := range calls {
			v := fakeGet(dt, src(r), i)
			if c.usePremul {
				v *= c.premul
			}
			switch {
			case r == 0:
				acc = v
			case op == ncclSum || op == ncclAvg || op >= 100:
				acc += v
			case op == ncclProd:
				acc *= v
			case op == ncclMax:
				acc = math.Max(acc, v)
			case op == ncclMin:
				acc = math.Min(acc, v)
			}
		}
		if op == ncclAvg {
			if isFloat(dt) {
				acc /= float64(len(calls))
			} else {
				acc = math.Trunc(acc / float64(len(calls)))
			}
		}
		out[i] = acc
	}
	return out
}

func execute(calls []*fakeCall) error {
	n := len(calls)
	c0 := calls[0]
	for r, c := range calls {
		if c.kind != c0.kind || c.count != c0.count || c.dt != c0.dt || c.root != c0.root {
			return fmt.Errorf("fake NCCL: mismatched collective: rank 0 %+v, rank %d %+v", *c0, r, *c)
		}
	}
	size := fakeSize(c0.dt)
	bytes := c0.count * size
	switch c0.kind {
	case "allreduce":
		res := fold(calls, c0.count, func(r int) []byte { return mem(calls[r].send, bytes) })
		for _, c := range calls {
			out := mem(c.recv, bytes)
			for i, v := range res {
				fakePut(c0.dt, out, i, v)
			}
		}
	case "reduce":
		res := fold(calls, c0.count, func(r int) []byte { return mem(calls[r].send, bytes) })
		out := mem(calls[c0.root].recv, bytes)
		for i, v := range res {
			fakePut(c0.dt, out, i, v)
		}
	case "broadcast":
		src := append([]byte(nil), mem(calls[c0.root].send, bytes)...)
		for _, c := range calls {
			copy(mem(c.recv, bytes), src)
		}
	case "allgather":
		parts := make([][]byte, n)
		for r, c := range calls {
			parts[r] = append([]byte(nil), mem(c.send, bytes)...)
		}
		for _, c := range calls {
			out := mem(c.recv, n*bytes)
			for r := range parts {
				copy(out[r*bytes:], parts[r])
			}
		}
	case "reducescatter":
		for r, c := range calls {
			res := fold(calls, c0.count, func(j int) []byte { return mem(calls[j].send+uintptr(r*bytes), bytes) })
			out := mem(c.recv, bytes)
			for i, v := range res {
				fakePut(c0.dt, out, i, v)
			}
		}
	default:
		return fmt.Errorf("fake NCCL: %s", c0.kind)
	}
	return nil
}
