package zcoll

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
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
	pos := (r.me - a.Root + n) % n // distance from the root along the chain
	next, prev := (r.me+1)%n, (r.me+n-1)%n
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
