package zcoll

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// AllReduce reduces In[0] elementwise across all ranks and leaves the
// result in Out[0] on every rank, with the contract of collective.AllReduce:
// In[0] and Out[0] are normally the same memory (in place); if they are
// not, In[0] is copied to Out[0] first and left intact. The length must be
// the same on every rank.
//
// Algorithm: two-shot. The buffer is cut into N blocks of whole elements
// (block b holds numel/N elements, one more for b < numel%N, in order);
// the reduce-scatter above reduces block b on rank b (rank order, float32
// accumulation for the narrow float types), and as each segment of it is
// final, rank b sends it straight to every other rank (framed: coded once,
// by its owner, the same frame to all). Every rank therefore ends with
// identical bits, and the result does not depend on the Plan.
//
// The all-gather is direct rather than a ring: its segments share the
// links with the reduce-scatter's, and a ring's later hops wait on its
// earlier ones, so when the reduce-scatter ends a ring still has a backlog
// that drains one hop after another with links idle. Sent directly, every
// segment is one hop from everyone; each rank sends and receives the same
// bytes as in the ring.
//
// Everything runs as one pipeline: the all-gather of a segment starts as
// soon as it is reduced. Received segments go straight into place, over
// this rank's own contribution to them: a reduced segment exists only
// after its owner received all of that contribution, so this rank has
// finished sending (or coding) it before any byte of the result arrives.
func AllReduce(ctx context.Context, c collective.VarConn, a Args) error {
	const op = "allreduce"
	r, err := newRun(op, "twoshot", c, &a, false)
	if err != nil {
		return err
	}
	data, err := checkAllReduce(op, &a)
	if err != nil {
		return err
	}
	if !bufs.Same(a.In[0], data) {
		if err := r.copyData(data, a.In[0]); err != nil {
			return err
		}
	}
	if r.n == 1 || len(data) == 0 {
		return nil
	}
	blocks := bufs.Split(data, r.n, r.es)
	gates := newGates(2)
	mine, sent := gates[0], gates[1] // own segments reduced, and sent to all
	ownSegs := r.cut(len(blocks[r.me])).n
	return r.reduceScatter(ctx, a.Op, blocks, blocks[r.me], rsHooks{
		reduced: func(int) { mine.advance() },
		more: func(sp spawner, ctx context.Context) {
			r.gatherDirect(sp, ctx, 2, blocks, blocks[r.me], mine.wait, func(int) { sent.advance() })
		},
		lead: func(ctx context.Context, k int) error {
			// Blocks one element apart may be cut into different
			// numbers of segments (the default size follows the block
			// size): never wait for a segment this rank does not have.
			if j := min(k-agLead, ownSegs-1); j >= 0 {
				return sent.wait(ctx, j)
			}
			return nil
		},
	})
}

// checkAllReduce validates an all-reduce's operands (AllReduce's contract)
// and returns its buffer, Out[0].
func checkAllReduce(op string, a *Args) ([]byte, error) {
	if err := need(op, "In", len(a.In), 1); err != nil {
		return nil, err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return nil, err
	}
	data := a.Out[0]
	if len(a.In[0]) != len(data) {
		return nil, fmt.Errorf("zcoll: %s: In[0] has %d bytes, Out[0] %d", op, len(a.In[0]), len(data))
	}
	if err := checkReduce(op, a, len(data)); err != nil {
		return nil, err
	}
	if bufs.Overlaps(a.In[0], data) && !bufs.Same(a.In[0], data) {
		return nil, fmt.Errorf("zcoll: %s: Out[0] partially overlaps In[0]", op)
	}
	return data, nil
}

// agLead is how many segments the reduce-scatter may send ahead of the
// all-gather, which shares its links. Unchecked, the all-gather falls
// behind, and its backlog is what every link waits on at the end (20 to 65
// ms of a 600 ms call at 1 Gbit/s, benchmarks/RESULTS.md); held to one
// segment, the two wait on each other.
const agLead = 2

// gatherDirect starts, in sp, the all-gather in which this rank sends its
// block (read from src; ready(ctx, k) waits until segment k is final) to
// every other rank at step, calling sent(k) once segment k went to all, and
// receives block b from rank b into dst[b]. In framed mode each segment is
// coded once and the frame goes to all.
func (r *run) gatherDirect(sp spawner, ctx context.Context, step int, dst [][]byte, src []byte,
	ready func(ctx context.Context, k int) error, sent func(k int)) {
	own := r.cut(len(src))
	if own.n > 0 {
		// One queue per peer: the encoder runs at most sendDepth segments
		// ahead of the slowest sender; the last sender of a frame frees it.
		qs := make([]chan *sharedFrame, r.n)
		for p := range r.n {
			if p != r.me {
				qs[p] = make(chan *sharedFrame, sendDepth)
			}
		}
		sp.Go(func() error {
			for k := range own.n {
				if err := ready(ctx, k); err != nil {
					return err
				}
				f := &sharedFrame{buf: own.of(src, k)}
				if r.framed {
					var err error
					if f.buf, err = r.encodeFrame(f.buf); err != nil {
						return err
					}
				}
				f.left.Store(int32(r.n - 1))
				for _, q := range qs {
					if q != nil {
						if err := workgroup.Put(ctx, q, f); err != nil {
							return err
						}
					}
				}
			}
			return nil
		})
		for p, q := range qs {
			if q == nil {
				continue
			}
			sp.Go(func() error {
				for k := range own.n {
					f, err := workgroup.Take(ctx, q)
					if err != nil {
						return err
					}
					if err := r.send(ctx, p, step, k, f.buf); err != nil {
						return err
					}
					if f.left.Add(-1) == 0 {
						if r.framed { // a frame from the coder
							r.co.PutMsg(f.buf)
						}
						sent(k)
					}
				}
				return nil
			})
		}
	}
	// Received segments go straight into place (see AllReduce for why).
	for p := range r.n {
		if p == r.me {
			continue
		}
		c := r.cut(len(dst[p]))
		workgroup.Spread(sp, windowFor(c.size, r.n-1, r.framed), c.n, func(k int) error {
			return r.recvSegment(ctx, p, step, k, c.of(dst[p], k))
		})
	}
}

// sharedFrame is one segment sent to several peers.
type sharedFrame struct {
	buf  []byte
	left atomic.Int32 // sends still to make
}
