package collective

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// Broadcast copies Root's In[0] into every rank's Out[0]. In[0] and Out[0]
// are normally the same memory; if not, the root copies In[0] to Out[0] and
// the other ranks ignore In[0]. The length must be the same on every rank.
//
// Algorithms:
//
//   - len*(size-1) <= BroadcastDirectMax: direct, the root sends to every
//     rank concurrently in one round.
//   - otherwise: a pipelined chain root -> root+1 -> ... -> root-1. The
//     buffer is cut into segments; each rank receives segment k straight
//     into Out[0] and forwards it while segment k+1 arrives, so every link
//     carries the data once and the time is about one transfer of the
//     buffer plus one segment per hop.
func Broadcast(ctx context.Context, c Conn, a Args) error {
	const op = "broadcast"
	n, me, err := checkComm(op, c, a.Root, true)
	if err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return err
	}
	buf := a.Out[0]
	if me == a.Root {
		if err := need(op, "In", len(a.In), 1); err != nil {
			return err
		}
		if len(a.In[0]) != len(buf) {
			return fmt.Errorf("collective: %s: In[0] has %d bytes, Out[0] %d", op, len(a.In[0]), len(buf))
		}
		if !bufs.Same(a.In[0], buf) {
			copy(buf, a.In[0])
		}
	}
	if n == 1 || len(buf) == 0 {
		return nil
	}
	if len(buf)*(n-1) <= BroadcastDirectMax {
		return directBroadcast(ctx, c, a.Root, buf)
	}
	if a.Local {
		return treeBroadcast(ctx, c, a.Root, buf)
	}
	return chainBroadcast(ctx, c, a.Root, buf, loadTuning(), granOf(a.DType))
}

// treeBroadcast sends the whole buffer down a binomial tree: with ranks
// renumbered so that the root is 0, rank v receives it from v less its
// highest set bit, then sends it to v+d for every power of two d > v,
// smallest first, so the holders double every round. Over a network the
// chain is faster (every link busy at once, about one buffer time instead
// of ceil(log2 n)); between ranks of one host, which share cores and
// memory, fewer and larger messages win: on 4 loopback ranks on 2 cores
// it took broadcast from 0.70-0.95x of gloo's speed to 0.97-1.20x
// (benchmarks/RESULTS.md, section g).
func treeBroadcast(ctx context.Context, c Conn, root int, buf []byte) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "broadcast", algo: "tree", c: c}
	v := (me - root + n) % n
	d := 1
	if v > 0 {
		hb := 1 << (bits.Len(uint(v)) - 1)
		if err := s.recv(ctx, (v-hb+root)%n, 0, 0, buf); err != nil {
			return err
		}
		d = hb << 1
	}
	for ; v+d < n; d <<= 1 {
		if err := s.send(ctx, (v+d+root)%n, 0, 0, buf); err != nil {
			return err
		}
	}
	return nil
}

func directBroadcast(ctx context.Context, c Conn, root int, buf []byte) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "broadcast", algo: "direct", c: c}
	if me != root {
		return s.recv(ctx, root, 0, 0, buf)
	}
	g, gctx := newGroup(ctx)
	for p := range n {
		if p != me {
			g.Go(func() error { return s.send(gctx, p, 0, 0, buf) })
		}
	}
	return g.Wait()
}

func chainBroadcast(ctx context.Context, c Conn, root int, buf []byte, t tuning, gran int) error {
	n, me := c.Size(), c.Rank()
	s := step{op: "broadcast", algo: "chain", c: c}
	pos := (me - root + n) % n // distance from the root along the chain
	next, prev := (me+1)%n, (me+n-1)%n
	cut := t.cut(buf, gran)
	g, gctx := newGroup(ctx)
	var in *window
	if pos > 0 {
		// Received straight into buf, several receives posted ahead.
		in = workgroup.RecvAhead(g, gctx, t.prefetch, cut.n, func(k int) (msg, error) {
			m := msg{buf: cut.at(k)}
			return m, s.recv(gctx, prev, 0, k, m.buf)
		})
	}
	// The forwarder sends segment k on as soon as it is in (the root: at
	// once). The last rank of the chain only collects its segments.
	g.Go(func() error {
		for k := range cut.n {
			if in != nil {
				if _, err := in.Next(gctx, k); err != nil {
					return err
				}
			}
			if pos < n-1 {
				if err := s.send(gctx, next, 0, k, cut.at(k)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return g.Wait()
}
