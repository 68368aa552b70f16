package comm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/transport"
)

// Point-to-point ops bypass the collective queue: a recv is posted at once
// (posting order is matching order, as in MPI) and a send goes through a
// per-destination FIFO so two sends with the same tag arrive in the order
// they were issued.

type sendQueue struct {
	mu      sync.Mutex
	pending []*task
	running bool
}

func (c *Comm) startP2P(t *task) {
	op := t.op
	if c.cfg.Size == 1 {
		// validate() already refused any peer in a group of one.
		go c.complete(t, -1, fmt.Errorf("zipccl: %s in a group of one", op.Kind))
		return
	}
	switch op.Kind {
	case Recv:
		if op.Root < 0 {
			c.mesh.Connect()
		}
		desc := describe(op, c.cfg.Rank).encode()
		pd := c.mesh.Post(op.Root, transport.Key{Kind: transport.P2P, Seq: uint64(op.Tag)}, op.Out[0], &desc)
		go func() {
			ctx, cancel := c.opContext(op)
			defer cancel()
			src, err := pd.Wait(ctx)
			c.complete(t, src, c.p2pErr(op, src, err))
		}()
	case Send:
		q := c.sendQ[op.Root]
		if q == nil {
			q = &sendQueue{}
			c.sendQ[op.Root] = q
		}
		q.mu.Lock()
		q.pending = append(q.pending, t)
		if !q.running {
			q.running = true
			go c.drainSends(q)
		}
		q.mu.Unlock()
	}
}

func (c *Comm) drainSends(q *sendQueue) {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		t := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		op := t.op
		desc := describe(op, c.cfg.Rank).encode()
		ctx, cancel := c.opContext(op)
		err := c.mesh.Send(ctx, op.Root, transport.Key{Kind: transport.P2P, Seq: uint64(op.Tag)}, &desc, op.In[0])
		cancel()
		if err == nil {
			t.wire.Add(byteLen(op.In))
		}
		c.complete(t, op.Root, c.p2pErr(op, op.Root, err))
	}
}

func (c *Comm) opContext(op *Op) (context.Context, context.CancelFunc) {
	timeout := c.Timeout()
	if op.Timeout > 0 {
		timeout = time.Duration(op.Timeout) * time.Millisecond
	}
	return context.WithTimeoutCause(c.ctx, timeout, &timeoutError{after: timeout.String()})
}

func (c *Comm) p2pErr(op *Op, peer int, err error) error {
	if err == nil {
		return nil
	}
	dir := "to"
	if op.Kind == Recv {
		dir = "from"
	}
	who := fmt.Sprintf("rank %d", peer)
	if peer < 0 {
		who = "any rank"
	}
	what := fmt.Sprintf("zipccl: %s %s %s (tag %d, %s) on rank %d of group %q", op.Kind, dir, who, op.Tag, op.DType, c.cfg.Rank, c.cfg.Name)
	return c.wrapErr(what, describe(op, c.cfg.Rank), err)
}
