package zcoll

import (
	"context"
	"fmt"
	"slices"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// Broadcast copies Root's In[0] into every rank's Out[0], with the contract
// of collective.Broadcast: In[0] and Out[0] are normally the same memory;
// if not, the root copies In[0] to Out[0] and the other ranks ignore In[0].
// The length must be the same on every rank (in framed mode, a whole
// number of elements).
//
// Algorithm: a pipelined chain root -> root+1 -> ... -> root-1. Plain
// mode receives each segment straight into Out[0] and forwards it from
// there. Framed mode is UCCL-Zip's split-send: per segment the root sends
// the static part as soon as it is split (for Huff, just the raw
// sign/mantissa bytes), then the dynamic part (coded exponents); every hop
// forwards both parts unchanged the moment each arrives, and decodes its
// own copy (codec DecodeSplit) when it has both, in whichever order they
// came (both receives are posted together).
func Broadcast(ctx context.Context, c collective.VarConn, a Args) error {
	return broadcast(ctx, c, a, nil)
}

// HierBroadcast is Broadcast with the chain ordered host by host: the
// root, the other ranks of its host, then each following host's ranks
// (hosts in order from the root's, ranks in local order), so the data
// crosses each host boundary once: H-1 host-link transfers of the buffer,
// each host's NIC receiving it once, where the chain in rank order crosses
// hosts at every hop whose ranks sit apart. Any layout of every rank once
// works (hosts of unequal size too); the bytes are Broadcast's.
func HierBroadcast(ctx context.Context, c collective.VarConn, a Args, h Hosts) error {
	if !hosts.Partition(h, c.Size()) {
		return fmt.Errorf("zcoll: broadcast: layout %v does not hold each of %d ranks once", h, c.Size())
	}
	return broadcast(ctx, c, a, h)
}

// chainOrder is the ranks along the broadcast chain from root: host by
// host from the root's (nil h: root, root+1, ...).
func chainOrder(n, root int, h Hosts) []int {
	order := make([]int, 0, n)
	if h == nil {
		for i := range n {
			order = append(order, (root+i)%n)
		}
		return order
	}
	home, _ := h.where(root)
	order = append(order, root)
	for i := range h {
		for _, r := range h[(home+i)%len(h)] {
			if r != root {
				order = append(order, r)
			}
		}
	}
	return order
}

func broadcast(ctx context.Context, c collective.VarConn, a Args, h Hosts) error {
	const op = "broadcast"
	r, err := newRun(op, "chain", c, &a, true)
	if err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return err
	}
	buf := a.Out[0]
	if r.me == a.Root {
		if err := need(op, "In", len(a.In), 1); err != nil {
			return err
		}
		if len(a.In[0]) != len(buf) {
			return fmt.Errorf("zcoll: %s: In[0] has %d bytes, Out[0] %d", op, len(a.In[0]), len(buf))
		}
		if !bufs.Same(a.In[0], buf) {
			if err := r.copyData(buf, a.In[0]); err != nil {
				return err
			}
		}
	}
	if err := r.wholeElements(buf); err != nil {
		return err
	}
	if r.n == 1 || len(buf) == 0 {
		return nil
	}
	n := r.n
	order := chainOrder(n, a.Root, h)
	pos := slices.Index(order, r.me) // distance from the root along the chain
	next, prev := order[(pos+1)%n], order[(pos+n-1)%n]
	cs := r.cut(len(buf))
	g, gctx := newGroup(ctx)
	switch {
	case !r.framed && pos == 0:
		r.outbound(g, gctx, next, 0, cs, buf, nil)
	case !r.framed:
		workgroup.Spread(g, windowFor(cs.size, 1, false), cs.n, func(k int) error {
			seg := cs.of(buf, k)
			if err := r.recv(gctx, prev, 0, k, seg); err != nil {
				return err
			}
			if pos < n-1 {
				return r.send(gctx, next, 0, k, seg)
			}
			return nil
		})
	case pos == 0:
		splitSend(g, gctx, r.co, r.st, buf, r.dt, r.kind, cs, func(st, k int, b []byte) error {
			return r.send(gctx, next, st, k, b)
		})
	default:
		var fwd func(st, k int, b []byte) error
		if pos < n-1 {
			fwd = func(st, k int, b []byte) error {
				if err := r.send(gctx, next, st, k, b); err != nil {
					return err
				}
				if st == stepStatic { // a forwarded segment (see rawOf)
					r.st.sent(cs.len(k))
				}
				return nil
			}
		}
		splitRecv(g, gctx, r.co, r.release, r.st, r.dt, r.kind, cs, windowFor(cs.size, 2, true),
			func(st, k int, b []byte) (int, error) { return r.recvUpTo(gctx, prev, st, k, b) },
			fwd,
			func(k int) (msg, error) { return msg{buf: cs.of(buf, k)}, nil },
			nil,
			func(k int, err error) error { return r.wrap("recv", prev, stepDynamic, k, err) })
	}
	return g.Wait()
}
