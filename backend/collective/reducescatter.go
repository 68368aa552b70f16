package collective

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// ReduceScatter reduces block j (In[j], one per rank, all of equal length)
// across ranks and leaves the result for block me in Out[0]. In is never
// modified; Out[0] may be the same memory as In[me] (in place).
//
// Algorithms and reduction order:
//
//   - len(In[0])*(size-1) <= ReduceScatterDirectMax: direct. Every rank
//     sends In[j] to rank j in one round and rank j computes
//     ((x[0] op x[1]) op ...) op x[size-1] in rank order.
//   - otherwise: the pipelined ring reduce-scatter (steps 0..size-2 of the
//     ring in ring.go, with partial results kept in scratch buffers so In is
//     untouched). Block j is reduced in the order
//     ((x[j+1] op x[j+2]) op ...) op x[j] (ranks mod size), the same as
//     AllReduce's ring.
func ReduceScatter(ctx context.Context, c Conn, a Args) error {
	const op = "reducescatter"
	n, me, err := checkComm(op, c, 0, false)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), n); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return err
	}
	size := len(a.Out[0])
	for j, b := range a.In {
		if len(b) != size {
			return fmt.Errorf("collective: %s: In[%d] has %d bytes, Out[0] %d", op, j, len(b), size)
		}
	}
	es, err := checkReduce(op, a, size)
	if err != nil {
		return err
	}
	if err := checkAlias(op, a.Out[0], a.In, me); err != nil {
		return err
	}
	if n == 1 || size == 0 {
		if !bufs.Same(a.Out[0], a.In[me]) {
			copy(a.Out[0], a.In[me])
		}
		return nil
	}
	if size*(n-1) <= ReduceScatterDirectMax {
		return directReduceScatter(ctx, c, a)
	}
	r, err := newRing(op, c, a, loadTuning(), es, 0, n-1, a.In)
	if err != nil {
		return err
	}
	r.final = a.Out[0]
	return r.run(ctx, nil)
}

func directReduceScatter(ctx context.Context, c Conn, a Args) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "reducescatter", algo: "direct", c: c}
	out := a.Out[0]
	xs := make([][]byte, n)
	xs[me] = a.In[me]
	g, gctx := newGroup(ctx)
	for p := range n {
		if p == me {
			continue
		}
		xs[p] = a.Pool.Get(len(out))
		g.Go(func() error {
			if err := s.send(gctx, p, 0, 0, a.In[p]); err != nil {
				return err
			}
			return s.recv(gctx, p, 0, 0, xs[p])
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	reduceInOrder(a.DType, a.Op, a.Pool, out, xs)
	for p, x := range xs {
		if p != me {
			a.Pool.Put(x)
		}
	}
	return nil
}

// Reduce reduces In[0] elementwise across ranks into Out[0] on Root. In[0]
// is not modified (except where the root passes the same memory as Out[0]);
// Out[0] is not touched on the other ranks and may be nil there.
//
// Algorithms and reduction order:
//
//   - len*(size-1) <= ReduceDirectMax: direct. Every rank sends In[0] to the
//     root, which computes ((x[0] op x[1]) op ...) op x[size-1] in rank
//     order.
//   - otherwise: pipelined ring reduce-scatter (as ReduceScatter, on the
//     buffer split into size blocks like AllReduce's ring) then every rank
//     streams its finished block b straight into the root's Out[0] as its
//     segments complete. Block b is reduced in the order
//     ((x[b+1] op x[b+2]) op ...) op x[b] (ranks mod size). Each rank sends
//     about 2(size-1)/size of the data rather than the root receiving all of
//     it from everyone.
func Reduce(ctx context.Context, c Conn, a Args) error {
	const op = "reduce"
	n, me, err := checkComm(op, c, a.Root, true)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), 1); err != nil {
		return err
	}
	in := a.In[0]
	var out []byte
	if me == a.Root {
		if err := need(op, "Out", len(a.Out), 1); err != nil {
			return err
		}
		if out = a.Out[0]; len(out) != len(in) {
			return fmt.Errorf("collective: %s: In[0] has %d bytes, Out[0] %d", op, len(in), len(out))
		}
	}
	es, err := checkReduce(op, a, len(in))
	if err != nil {
		return err
	}
	if err := checkAlias(op, out, a.In, 0); err != nil {
		return err
	}
	if n == 1 || len(in) == 0 {
		if !bufs.Same(out, in) {
			copy(out, in)
		}
		return nil
	}
	if len(in)*(n-1) <= ReduceDirectMax {
		return directReduce(ctx, c, a, out)
	}
	r, err := newRing(op, c, a, loadTuning(), es, 0, n-1, bufs.Split(in, n, es))
	if err != nil {
		return err
	}
	if me != a.Root {
		r.root = a.Root
		return r.run(ctx, nil)
	}
	outs := bufs.Split(out, n, es)
	r.final = outs[me]
	// The root receives every other block straight into its place in Out[0].
	// When Out[0] is In[0] this overwrites input the root still needed only
	// if block b could finish before the root contributed to it, which the
	// ring rules out: block b reaches rank b only after passing the root.
	gather := func(g *group, ctx context.Context) {
		for p := range n {
			if p == me {
				continue
			}
			cut, dst := r.cuts[p], outs[p]
			workgroup.Spread(g, 2, cut.n, func(k int) error {
				return r.recv(ctx, p, n-1, k, cut.of(dst, k))
			})
		}
	}
	return r.run(ctx, gather)
}

func directReduce(ctx context.Context, c Conn, a Args, out []byte) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "reduce", algo: "direct", c: c}
	in := a.In[0]
	if me != a.Root {
		return s.send(ctx, a.Root, 0, 0, in)
	}
	xs := make([][]byte, n)
	xs[me] = in
	g, gctx := newGroup(ctx)
	for p := range n {
		if p == me {
			continue
		}
		xs[p] = a.Pool.Get(len(in))
		g.Go(func() error { return s.recv(gctx, p, 0, 0, xs[p]) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	reduceInOrder(a.DType, a.Op, a.Pool, out, xs)
	for p, x := range xs {
		if p != me {
			a.Pool.Put(x)
		}
	}
	return nil
}
