package collective

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
	"github.com/zipccl/zipccl/backend/reduce"
)

// The ring. Rank r sends only to r+1 and receives only from r-1, so every
// link carries the same load and a rank moves 2(n-1)/n of the data for an
// all-reduce, which is optimal. The data is cut into n blocks; at global
// step t (0 <= t < 2n-2) rank r
//
//	sends    block (r-t-1) mod n to r+1, and
//	receives block (r-t-2) mod n from r-1,
//
// so the block a rank receives at step t is the one it sends at step t+1.
// Steps t < n-1 are the reduce-scatter: the received partial result is
// combined with the rank's own contribution as
//
//	partial = received op own
//
// After step n-2 rank r holds the complete block r. Steps t >= n-1 are the
// all-gather, which copies the finished blocks around the ring. Block b
// therefore starts as rank b+1's data and picks up contributions in ring
// order, giving the association
//
//	((x[b+1] op x[b+2]) op ... ) op x[b]     (rank indices mod n)
//
// It depends only on (n, b); each element is reduced once by one rank and
// then copied, so all ranks get identical bits on every run.
//
// Pipelining: each block is cut into segments, and segment k of step t is
// message Slot(t, k). The goroutines of a rank overlap the work: Prefetch
// receivers keep the next receives posted (so the transport writes straight
// into our buffers instead of a temporary one), the processor reduces in
// order, and the sender forwards segment k of step t+1 as soon as segment k
// of step t is reduced.

// ring is one rank's part in a ring pass over steps [first, last).
type ring struct {
	step
	t          tuning
	n, me      int
	next, prev int
	dt         dtype.DType
	op         reduce.Op
	gran       int
	pool       *Pool
	first      int
	last       int

	// blocks[b] is this rank's view of block b: what it sends at the first
	// step, the own contribution it reduces in, and (all-gather steps) where
	// received blocks land. cuts[b] is how block b is segmented.
	blocks [][]byte
	cuts   []segments

	// inPlace: reduce-scatter results overwrite blocks[b] (all-reduce).
	// Otherwise they go to scratch buffers, leaving the input untouched.
	inPlace bool
	// final, when not nil, receives the completed block me at step n-2.
	final []byte
	// root >= 0 makes the sender forward the completed block me to root
	// (rooted reduce on a non-root rank) as messages Slot(n-1, k).
	root int
}

// msg is a segment travelling between the ring's goroutines. scratch marks
// buffers owned by the pool, to be returned once their last use is done.
type msg struct {
	buf     []byte
	scratch bool
}

func newRing(op string, c Conn, a Args, t tuning, gran, first, last int, blocks [][]byte) (*ring, error) {
	n, me := c.Size(), c.Rank()
	if last > maxSteps {
		return nil, fmt.Errorf("collective: %s: group of %d is too large for the ring (step %d exceeds the slot space)", op, n, last)
	}
	r := &ring{
		step: step{op: op, algo: "ring", c: c},
		t:    t, n: n, me: me,
		next: (me + 1) % n, prev: (me + n - 1) % n,
		dt: a.DType, op: a.Op, gran: gran, pool: a.Pool,
		first: first, last: last, blocks: blocks, root: -1,
	}
	r.cuts = make([]segments, n)
	for b, buf := range blocks {
		r.cuts[b] = t.cut(buf, gran)
	}
	return r, nil
}

func (r *ring) sendBlock(t int) int { return ((r.me-t-1)%r.n + r.n) % r.n }
func (r *ring) recvBlock(t int) int { return ((r.me-t-2)%r.n + r.n) % r.n }

// run executes the pass; extra goroutines (a root's gather receivers) may be
// added to the same group by the caller through more.
func (r *ring) run(ctx context.Context, more func(g *group, ctx context.Context)) error {
	g, ctx := newGroup(ctx)
	// The receive sequence: segment k of block recvBlock(t), for every step.
	var seq []pos
	for t := r.first; t < r.last; t++ {
		for k := range r.cuts[r.recvBlock(t)].n {
			seq = append(seq, pos{t, k})
		}
	}
	// fwd carries finished segments from processor to sender in the order the
	// sender needs them. It is sized for everything the pass forwards so the
	// processor never waits on the sender: in steady state the sender is a
	// whole step behind (it forwards step t while step t+1 is being reduced).
	nfwd := len(seq) - r.cuts[r.recvBlock(r.last-1)].n
	if r.root >= 0 {
		nfwd += r.cuts[r.me].n
	}
	fwd := make(chan msg, nfwd)
	w := r.t.prefetch
	if r.first < r.n-1 { // reduce-scatter receives hold scratch
		w = r.t.scratchWindow(r.cuts[r.recvBlock(r.first)].size)
	}
	in := workgroup.RecvAhead(g, ctx, w, len(seq), func(i int) (msg, error) {
		p := seq[i]
		m := msg{buf: r.cuts[r.recvBlock(p.t)].at(p.k)} // all-gather: straight into place
		if p.t < r.n-1 {
			m = msg{buf: r.pool.Get(len(m.buf)), scratch: true}
		}
		return m, r.recv(ctx, r.prev, p.t, p.k, m.buf)
	})
	g.Go(func() error { return r.sender(ctx, fwd) })
	g.Go(func() error { return r.processor(ctx, in, fwd) })
	if more != nil {
		more(g, ctx)
	}
	return g.Wait()
}

// pos is a (step, segment) pair.
type pos struct{ t, k int }

func (r *ring) sender(ctx context.Context, fwd <-chan msg) error {
	for t := r.first; t < r.last; t++ {
		cut := r.cuts[r.sendBlock(t)]
		for k := range cut.n {
			m := msg{buf: cut.at(k)}
			if t > r.first {
				var err error
				if m, err = workgroup.Take(ctx, fwd); err != nil {
					return err
				}
			}
			if err := r.send(ctx, r.next, t, k, m.buf); err != nil {
				return err
			}
			if m.scratch {
				r.pool.Put(m.buf)
			}
		}
	}
	if r.root >= 0 {
		for k := range r.cuts[r.me].n {
			m, err := workgroup.Take(ctx, fwd)
			if err != nil {
				return err
			}
			if err := r.send(ctx, r.root, r.n-1, k, m.buf); err != nil {
				return err
			}
			r.pool.Put(m.buf)
		}
	}
	return nil
}

func (r *ring) processor(ctx context.Context, in *window, fwd chan<- msg) error {
	i := 0
	for t := r.first; t < r.last; t++ {
		cut := r.cuts[r.recvBlock(t)]
		forward := t < r.last-1 || (t == r.n-2 && r.root >= 0)
		for k := range cut.n {
			m, err := in.Next(ctx, i)
			if err != nil {
				return err
			}
			i++
			if t < r.n-1 {
				own := cut.at(k)
				switch {
				case r.inPlace:
					reduce.Reduce3(r.dt, r.op, own, m.buf, own)
					r.pool.Put(m.buf)
					m = msg{buf: own}
				case t == r.n-2 && r.final != nil:
					dst := cut.of(r.final, k)
					reduce.Reduce3(r.dt, r.op, dst, m.buf, own)
					r.pool.Put(m.buf)
					m = msg{buf: dst}
				default:
					reduce.Reduce3(r.dt, r.op, m.buf, m.buf, own)
				}
			}
			if forward {
				fwd <- m // never blocks: fwd holds every forwarded segment
			} else if m.scratch {
				r.pool.Put(m.buf)
			}
		}
	}
	return nil
}
