package zcoll

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// AllToAll sends In[j] to rank j and receives Out[j] from rank j, with the
// contract of collective.AllToAll: lengths may differ (uneven splits),
// including zero; rank i's len(In[j]) must equal rank j's len(Out[i]); the
// rank's own block is copied locally. In framed mode every length must be a
// whole number of elements.
//
// Every pairwise exchange runs concurrently, each direction as its own
// pipeline: plain mode sends segments straight from In[j] and receives
// them straight into Out[j]; design 1 codes each segment as a frame
// (an encoder stays ahead of the sender) received with RecvUpTo and decoded
// into Out[j] while the next ones arrive; design 2 sends each segment's
// static part before its dynamic part (split mode, see SendSplit) with both
// receives posted together. An error that concerns one exchange only (a
// corrupt frame, a length mismatch from the transport) stops that exchange
// but not the others; the first error is returned once all have ended.
func AllToAll(ctx context.Context, c collective.VarConn, a Args) error {
	const op = "alltoall"
	r, err := newRun(op, "pairwise", c, &a, false)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), r.n); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), r.n); err != nil {
		return err
	}
	if len(a.In[r.me]) != len(a.Out[r.me]) {
		return fmt.Errorf("zcoll: %s: In[%d] has %d bytes, Out[%d] %d", op, r.me, len(a.In[r.me]), r.me, len(a.Out[r.me]))
	}
	if err := r.wholeElements(append(append([][]byte(nil), a.In...), a.Out...)...); err != nil {
		return err
	}
	g, gctx := newIndependentGroup(ctx)
	var xs []*exchange
	for p := range r.n {
		if p == r.me {
			continue
		}
		if in := a.In[p]; len(in) > 0 {
			x, xctx := newExchange(g, gctx)
			xs = append(xs, x)
			r.outbound(x, xctx, p, 0, r.cut(len(in)), in, nil)
		}
		if out := a.Out[p]; len(out) > 0 {
			x, xctx := newExchange(g, gctx)
			xs = append(xs, x)
			c := r.cut(len(out))
			r.inbound(x, xctx, p, 0, c, func(k int) (msg, error) { return msg{buf: c.of(out, k)}, nil }, false)
		}
	}
	if !bufs.Same(a.Out[r.me], a.In[r.me]) {
		if err := r.copyData(a.Out[r.me], a.In[r.me]); err != nil {
			g.Go(func() error { return err })
		}
	}
	err = g.Wait()
	for _, x := range xs {
		x.done()
	}
	return err
}

// wholeElements checks, in framed mode, that every buffer is a whole number
// of elements (the codec works on elements).
func (r *run) wholeElements(bufs ...[]byte) error {
	if !r.framed {
		return nil
	}
	for _, b := range bufs {
		if len(b)%r.es != 0 {
			return fmt.Errorf("zcoll: %s: buffer of %d bytes is not a whole number of %v elements", r.op, len(b), r.dt)
		}
	}
	return nil
}

func (r *run) send(ctx context.Context, peer, step, k int, bufs ...[]byte) error {
	if err := r.c.Send(ctx, peer, collective.Slot(step, k), bufs...); err != nil {
		return r.wrap("send", peer, step, k, err)
	}
	r.st.sent(r.rawOf(bufs))
	return nil
}

// rawOf is what bufs stand for uncoded: plain messages themselves, frames
// their decoded length. Split parts count 0 here: splitSend counts their
// segments (the static part carries no frame header).
func (r *run) rawOf(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		if !r.framed {
			n += len(b)
		} else if h, err := codec.PeekHeader(b); err == nil {
			n += h.RawLen
		}
	}
	return n
}

func (r *run) recv(ctx context.Context, peer, step, k int, buf []byte) error {
	if err := r.c.Recv(ctx, peer, collective.Slot(step, k), buf); err != nil {
		return r.wrap("recv", peer, step, k, err)
	}
	return nil
}

func (r *run) recvUpTo(ctx context.Context, peer, step, k int, buf []byte) (int, error) {
	n, err := r.c.RecvUpTo(ctx, peer, collective.Slot(step, k), buf)
	if err != nil {
		return 0, r.wrap("recv", peer, step, k, err)
	}
	return n, nil
}

// wrap reports which part of the operation failed, as collective does; a
// decoding failure is reported as a failed receive.
func (r *run) wrap(action string, peer, step, k int, err error) error {
	return &collective.Error{Op: r.op, Algo: r.algo, Action: action, Peer: peer, Step: step, Segment: k, Err: err}
}

// outbound starts, in sp, the goroutines that send block src (cut c) to
// peer as messages at step (and step+1 in split mode). pace(ctx, k), if
// not nil, is waited for before
// segment k is sent, and called with k = c.n once every segment is sent.
func (r *run) outbound(sp spawner, ctx context.Context, peer, step int, c cut, src []byte, pace func(ctx context.Context, k int) error) {
	if c.n == 0 {
		return
	}
	switch {
	case !r.framed:
		sp.Go(func() error {
			for k := range c.n {
				if pace != nil {
					if err := pace(ctx, k); err != nil {
						return err
					}
				}
				if err := r.send(ctx, peer, step, k, c.of(src, k)); err != nil {
					return err
				}
			}
			if pace != nil {
				return pace(ctx, c.n)
			}
			return nil
		})
	case r.design == 1:
		q := make(chan []byte, sendDepth)
		sp.Go(func() error {
			for k := range c.n {
				f, err := r.encodeFrame(c.of(src, k))
				if err != nil {
					return err
				}
				if err := workgroup.Put(ctx, q, f); err != nil {
					return err
				}
			}
			return nil
		})
		sp.Go(func() error {
			for k := range c.n {
				f, err := workgroup.Take(ctx, q)
				if err != nil {
					return err
				}
				if pace != nil {
					if err := pace(ctx, k); err != nil {
						return err
					}
				}
				if err := r.send(ctx, peer, step, k, f); err != nil {
					return err
				}
				r.co.PutMsg(f)
			}
			if pace != nil {
				return pace(ctx, c.n)
			}
			return nil
		})
	default:
		splitSend(sp, ctx, r.co, r.st, src, r.dt, r.kind, c, func(st, k int, buf []byte) error {
			if pace != nil && st == stepStatic {
				if err := pace(ctx, k); err != nil {
					return err
				}
			}
			if err := r.send(ctx, peer, step+st, k, buf); err != nil {
				return err
			}
			if pace != nil && st == stepDynamic && k == c.n-1 {
				return pace(ctx, c.n)
			}
			return nil
		})
	}
}

// sendDepth is how many coded frames an encoder may run ahead of its sender.
const sendDepth = 2

// inbound starts, in sp, the goroutines that receive a block (cut c) from
// peer at step (and step+1 in split mode); segment k lands, decoded, in
// into(k).buf (a segment of Out, or scratch), or, with into nil (ordered
// framed receives only), stays coded in msg.coded for a device fold. With
// ordered, the segments are then collected in order from the returned
// window, and the caller must collect every one; otherwise nil is returned.
func (r *run) inbound(sp spawner, ctx context.Context, peer, step int, c cut, into func(k int) (msg, error), ordered bool) *window {
	if c.n == 0 {
		return nil
	}
	// Scratch is held by framed receives, and by plain ones that are reduced
	// (ordered); plain receives into Out hold none.
	w := windowFor(c.size, r.n-1, r.framed || ordered)
	var f func(k int) (msg, error)
	switch {
	case !r.framed:
		f = func(k int) (msg, error) {
			m, err := into(k)
			if err != nil {
				return msg{}, err
			}
			if err := r.recv(ctx, peer, step, k, m.buf); err != nil {
				r.release(m)
				return msg{}, err
			}
			return m, nil
		}
	case r.design == 1:
		f = func(k int) (msg, error) {
			buf := r.co.Msg(codec.MaxEncodedLen(c.len(k), r.dt))
			nb, err := r.recvUpTo(ctx, peer, step, k, buf)
			if err != nil {
				r.co.PutMsg(buf)
				return msg{}, err
			}
			if into == nil {
				if err := checkFrame(buf[:nb], c.len(k), r.dt); err != nil {
					r.co.PutMsg(buf)
					return msg{}, r.wrap("recv", peer, step, k, err)
				}
				return msg{coded: &FoldSource{Frame: buf[:nb]}}, nil
			}
			m, err := into(k)
			if err == nil {
				if err = decodeFrame(r.co, r.st, m.buf, buf[:nb], r.dt); err != nil {
					r.release(m)
				}
			}
			r.co.PutMsg(buf)
			if err != nil {
				return msg{}, r.wrap("recv", peer, step, k, err)
			}
			return m, nil
		}
	default:
		var out chan msg
		var deliver func(k int, m msg) error
		if ordered {
			out = make(chan msg, w)
			deliver = func(_ int, m msg) error { return workgroup.Put(ctx, out, m) }
		}
		splitRecv(sp, ctx, r.co, r.release, r.st, r.dt, r.kind, c, w,
			func(st, k int, buf []byte) (int, error) { return r.recvUpTo(ctx, peer, step+st, k, buf) },
			nil, into, deliver,
			func(k int, err error) error { return r.wrap("recv", peer, step+stepDynamic, k, err) })
		if ordered {
			return workgroup.Ordered(out)
		}
		return nil
	}
	if ordered {
		return workgroup.RecvAhead(sp, ctx, w, c.n, f)
	}
	workgroup.Spread(sp, w, c.n, func(k int) error { _, err := f(k); return err })
	return nil
}
