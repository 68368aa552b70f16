package collective

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// AllReduce reduces In[0] elementwise across all ranks and leaves the result
// in Out[0] on every rank. In[0] and Out[0] are normally the same memory (in
// place); if they are not, In[0] is copied to Out[0] first and left intact.
// The length must be the same on every rank.
//
// Algorithms and reduction order (identical bits on every rank and run):
//
//   - len*(size-1) <= AllReduceDirectMax: direct exchange. Every rank sends
//     its buffer to every other rank in one round and each rank computes
//     ((x[0] op x[1]) op x[2]) ... op x[size-1] in rank order. All ranks run
//     the same operations on the same operands in the same order, so they
//     agree bit for bit.
//   - otherwise: pipelined ring reduce-scatter + ring all-gather (see the
//     ring description in ring.go). The buffer is split into size blocks on
//     element boundaries (block b gets numel/size elements, the first
//     numel%size blocks one more); block b is reduced once, by rank b, in
//     the order ((x[b+1] op x[b+2]) op ...) op x[b] (ranks mod size), and
//     copied to the others.
func AllReduce(ctx context.Context, c Conn, a Args) error {
	const op = "allreduce"
	n, _, err := checkComm(op, c, 0, false)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), 1); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return err
	}
	data := a.Out[0]
	if len(a.In[0]) != len(data) {
		return fmt.Errorf("collective: %s: In[0] has %d bytes, Out[0] %d", op, len(a.In[0]), len(data))
	}
	es, err := checkReduce(op, a, len(data))
	if err != nil {
		return err
	}
	if !bufs.Same(a.In[0], data) {
		copy(data, a.In[0])
	}
	if n == 1 || len(data) == 0 {
		return nil
	}
	if len(data)*(n-1) <= AllReduceDirectMax {
		return directAllReduce(ctx, c, a, data)
	}
	r, err := newRing(op, c, a, loadTuning(), es, 0, 2*(n-1), bufs.Split(data, n, es))
	if err != nil {
		return err
	}
	r.inPlace = true
	return r.run(ctx, nil)
}

// directAllReduce: one round, everyone to everyone, then a rank-order
// reduction on every rank.
func directAllReduce(ctx context.Context, c Conn, a Args, data []byte) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "allreduce", algo: "direct", c: c}
	xs := make([][]byte, n)
	xs[me] = data
	g, gctx := newGroup(ctx)
	for p := range n {
		if p == me {
			continue
		}
		xs[p] = a.Pool.Get(len(data))
		g.Go(func() error {
			if err := s.send(gctx, p, 0, 0, data); err != nil {
				return err
			}
			return s.recv(gctx, p, 0, 0, xs[p])
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// data is both xs[me] and the destination; reduceInOrder copies it
	// aside when it is needed after the first write (me >= 2).
	reduceInOrder(a.DType, a.Op, a.Pool, data, xs)
	for p, x := range xs {
		if p != me {
			a.Pool.Put(x)
		}
	}
	return nil
}
