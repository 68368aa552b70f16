package collective

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// AllGather collects every rank's In[0] into Out[j] (one buffer per rank) on
// all ranks. Shards may differ in length between ranks, but every rank must
// pass the same lengths, and len(Out[me]) == len(In[0]). Out[me] may be the
// same memory as In[0]. Nothing is reduced, so the result is exact.
//
// Algorithms:
//
//   - sum of len(Out) <= AllGatherDirectMax: direct, every rank sends its
//     shard to every other rank in one round.
//   - otherwise: the pipelined ring all-gather (steps size-1..2size-3 of the
//     ring in ring.go). Shards are received straight into Out and forwarded
//     from there; a rank's own shard is sent from In[0], and copied into
//     Out[me] locally while the ring runs.
func AllGather(ctx context.Context, c Conn, a Args) error {
	const op = "allgather"
	n, me, err := checkComm(op, c, 0, false)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), 1); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), n); err != nil {
		return err
	}
	in := a.In[0]
	if len(a.Out[me]) != len(in) {
		return fmt.Errorf("collective: %s: In[0] has %d bytes, Out[%d] %d", op, len(in), me, len(a.Out[me]))
	}
	total := 0
	for _, b := range a.Out {
		total += len(b)
	}
	local := func() {
		if !bufs.Same(a.Out[me], in) {
			copy(a.Out[me], in)
		}
	}
	if n == 1 || total == 0 {
		local()
		return nil
	}
	if total <= AllGatherDirectMax {
		return directAllGather(ctx, c, a, local)
	}
	blocks := make([][]byte, n)
	copy(blocks, a.Out)
	blocks[me] = in // sent once, at the first step: straight from the input
	r, err := newRing(op, c, a, loadTuning(), granOf(a.DType), n-1, 2*(n-1), blocks)
	if err != nil {
		return err
	}
	// The local copy overlaps the ring; no goroutine writes Out[me].
	return r.run(ctx, func(g *group, _ context.Context) {
		g.Go(func() error { local(); return nil })
	})
}

func directAllGather(ctx context.Context, c Conn, a Args, local func()) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "allgather", algo: "direct", c: c}
	g, gctx := newGroup(ctx)
	for p := range n {
		if p == me {
			continue
		}
		g.Go(func() error {
			if len(a.In[0]) > 0 {
				if err := s.send(gctx, p, 0, 0, a.In[0]); err != nil {
					return err
				}
			}
			if len(a.Out[p]) > 0 {
				return s.recv(gctx, p, 0, 0, a.Out[p])
			}
			return nil
		})
	}
	local()
	return g.Wait()
}
