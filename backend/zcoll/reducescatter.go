package zcoll

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/reduce"
)

// ReduceScatter reduces block j (In[j], one per rank, all of equal length)
// across ranks and leaves the result for block me in Out[0], with the
// contract of collective.ReduceScatter: In is never modified; Out[0] may be
// the same memory as In[me] (in place) but must not otherwise overlap In.
//
// Algorithm: an all-to-all of In[j] to rank j (plain, design 1 or design 2
// as the Plan says, pipelined by segment), then a local reduction of the N
// contributions of each segment of my block in rank order 0..N-1, folded as
// soon as the next contribution in that order is in (see the package
// documentation for the arithmetic: float32 accumulation with one rounding
// for bfloat16/float16/float8 SUM and PRODUCT, the dtype otherwise). Only
// a few segments per peer are held in scratch at a time.
func ReduceScatter(ctx context.Context, c collective.VarConn, a Args) error {
	const op = "reducescatter"
	r, err := newRun(op, "alltoall", c, &a, false)
	if err != nil {
		return err
	}
	out, err := checkReduceScatter(op, &a, r.n, r.me)
	if err != nil {
		return err
	}
	if r.n == 1 || len(out) == 0 {
		if !bufs.Same(out, a.In[r.me]) {
			return r.copyData(out, a.In[r.me])
		}
		return nil
	}
	return r.reduceScatter(ctx, a.Op, a.In, out, rsHooks{})
}

// checkReduceScatter validates a reduce-scatter's operands on rank me of n
// (ReduceScatter's contract) and returns its output, Out[0].
func checkReduceScatter(op string, a *Args, n, me int) ([]byte, error) {
	if err := need(op, "In", len(a.In), n); err != nil {
		return nil, err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return nil, err
	}
	out := a.Out[0]
	for j, b := range a.In {
		if len(b) != len(out) {
			return nil, fmt.Errorf("zcoll: %s: In[%d] has %d bytes, Out[0] %d", op, j, len(b), len(out))
		}
	}
	if err := checkReduce(op, a, len(out)); err != nil {
		return nil, err
	}
	for j, in := range a.In {
		if bufs.Overlaps(out, in) && !(j == me && bufs.Same(out, in)) {
			return nil, fmt.Errorf("zcoll: %s: Out[0] partially overlaps In[%d]", op, j)
		}
	}
	return out, nil
}

// paceLag is how many segments one stream of a reduce-scatter may run
// ahead of the slowest other.
const paceLag = 4

// rsHooks let all-reduce run its all-gather inside the reduce-scatter.
type rsHooks struct {
	reduced func(k int)                           // segment k of out is final
	more    func(sp spawner, ctx context.Context) // more goroutines for the same group
	// lead, if not nil, waits before segment k of any stream is sent
	lead func(ctx context.Context, k int) error
}

// reduceScatter runs the exchange and the fold: blocks[p] is this rank's
// contribution to rank p's block (blocks[me] is its own), out receives the
// reduced block me (len(out) == len(blocks[me]); it may be exactly
// blocks[me]).
func (r *run) reduceScatter(ctx context.Context, op reduce.Op, blocks [][]byte, out []byte, h rsHooks) error {
	g, gctx := newGroup(ctx)
	// The streams to the peers are paced: none sends segment k before every
	// other has sent segment k-paceLag, so that each receiver (which folds
	// in rank order, holding only a few segments per peer) gets a peer's
	// segments at about the rate of the others'.
	progress := newGates(r.n)
	for p := range r.n {
		if p == r.me || len(blocks[p]) == 0 {
			progress[p].open()
		}
	}
	pace := func(self, count int) func(ctx context.Context, k int) error {
		return func(ctx context.Context, k int) error {
			if k == count {
				progress[self].open() // all sent
				return nil
			}
			if k > 0 {
				progress[self].advance() // segment k-1 is sent
			}
			if h.lead != nil {
				if err := h.lead(ctx, k); err != nil {
					return err
				}
			}
			if k < paceLag {
				return nil
			}
			for q := range r.n {
				if q != self {
					if err := progress[q].wait(ctx, k-paceLag); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	for p := range r.n {
		if p == r.me || len(blocks[p]) == 0 {
			continue
		}
		c := r.cut(len(blocks[p]))
		r.outbound(g, gctx, p, 0, c, blocks[p], pace(p, c.n))
	}
	mine := r.cut(len(out))
	streams := make([]*window, r.n)
	into := func(k int) (msg, error) { return r.scratch(mine.len(k)) }
	if r.dev != nil {
		into = nil // the device folds the messages as received (foldDevice)
	}
	for p := range r.n {
		if p != r.me {
			streams[p] = r.inbound(g, gctx, p, 0, mine, into, true)
		}
	}
	fold := r.fold
	if r.dev != nil {
		fold = r.foldDevice
	}
	g.Go(func() error { return fold(gctx, op, out, blocks[r.me], mine, streams, h.reduced) })
	if h.more != nil {
		h.more(g, gctx)
	}
	return g.Wait()
}

// fold reduces, segment by segment, the contributions of every rank in rank
// order into out: own is this rank's contribution, streams[p] delivers
// rank p's segments in order.
func (r *run) fold(ctx context.Context, op reduce.Op, out, own []byte, c cut, streams []*window, reduced func(k int)) error {
	n, me, dt := r.n, r.me, r.dt
	widened := n >= 3 && reduce.Accumulable(dt, op)
	var acc []float32
	if widened {
		buf := r.pool.Get(c.size / r.es * 4)
		defer r.pool.Put(buf)
		acc = f32s(buf, c.size/r.es)
	}
	// In place with me >= 2, the dtype fold must not overwrite own before
	// folding it in: it runs in side until then (reduce.Reduce3 allows the
	// destination to be exactly an operand).
	var side []byte
	if !widened && n >= 3 && me >= 2 && bufs.Same(out, own) {
		side = r.pool.Get(c.size)
		defer r.pool.Put(side)
	}
	release := r.release
	for k := range c.n {
		o := c.of(out, k)
		cur := o
		if side != nil {
			cur = side[:len(o)]
		}
		var a []float32
		if widened {
			a = acc[:len(o)/r.es]
		}
		var x0 msg
		for i := range n {
			var m msg
			if i == me {
				m = msg{buf: c.of(own, k)}
			} else {
				var err error
				if m, err = streams[i].Next(ctx, k); err != nil {
					return err
				}
			}
			if i == 0 {
				x0 = m
				if n == 1 && !bufs.Same(o, m.buf) {
					copy(o, m.buf) // alone: the result is its own block
				}
				continue
			}
			start := time.Now()
			switch {
			case n == 2:
				reduce.Reduce3(dt, op, o, x0.buf, m.buf)
			case widened && i == 1:
				reduce.AccumInit(dt, op, a, x0.buf, m.buf)
			case widened && i < n-1:
				reduce.Accum(dt, op, a, m.buf)
			case widened:
				reduce.AccumFinish(dt, op, o, a, m.buf)
			case i == 1:
				reduce.Reduce3(dt, op, cur, x0.buf, m.buf)
			case i == me && side != nil:
				reduce.Reduce3(dt, op, o, cur, m.buf) // m.buf is o: exact aliasing
				cur = o
			default:
				reduce.Reduce(dt, op, cur, m.buf)
			}
			r.st.reduced(start)
			if i == 1 {
				release(x0)
			}
			release(m)
		}
		if reduced != nil {
			reduced(k)
		}
	}
	return nil
}

// foldDevice is fold for device memory: once every contribution to
// segment k is in, still coded, one Fold decodes and reduces them all (the
// device accumulates in float32 within a call only).
func (r *run) foldDevice(ctx context.Context, op reduce.Op, out, own []byte, c cut, streams []*window, reduced func(k int)) error {
	srcs := make([]FoldSource, r.n)
	ms := make([]msg, r.n)
	defer func() {
		for _, m := range ms {
			r.release(m)
		}
	}()
	for k := range c.n {
		for i := range r.n {
			if i == r.me {
				srcs[i] = FoldSource{Plain: c.of(own, k)}
				continue
			}
			m, err := streams[i].Next(ctx, k)
			if err != nil {
				return err
			}
			ms[i], srcs[i] = m, *m.coded
		}
		start := time.Now()
		if err := r.dev.Fold(r.dt, int(op), c.of(out, k), srcs); err != nil {
			return err
		}
		r.st.reduced(start)
		for i, m := range ms {
			r.release(m)
			ms[i] = msg{}
		}
		if reduced != nil {
			reduced(k)
		}
	}
	return nil
}

// scratch returns a buffer of n bytes for a decoded segment.
func (r *run) scratch(n int) (msg, error) {
	if r.dev != nil {
		b, err := r.dev.Scratch(n)
		return msg{buf: b, scratch: true}, err
	}
	return msg{buf: r.pool.Get(n), scratch: true}, nil
}

// release takes back m's buffer if it is scratch, or the messages it holds.
func (r *run) release(m msg) {
	if m.coded != nil {
		for _, b := range m.coded.msgs() {
			if b != nil {
				r.co.PutMsg(b)
			}
		}
	}
	switch {
	case !m.scratch:
	case r.dev != nil:
		r.dev.PutScratch(m.buf)
	default:
		r.pool.Put(m.buf)
	}
}

// f32s views the first n float32s of b (a pool buffer, which the allocator
// aligns to at least 8 bytes), or allocates if b is not aligned.
func f32s(b []byte, n int) []float32 {
	if n == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 || len(b) < 4*n {
		return make([]float32, n)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}
