package zcoll

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// AllGather collects every rank's In[0] into Out[j] (one buffer per rank)
// on all ranks, with the contract of collective.AllGather: shards may differ
// in length between ranks but every rank passes the same lengths,
// len(Out[me]) == len(In[0]), and Out[me] may be the same memory as In[0].
// In framed mode every length must be a whole number of elements.
//
// Algorithm: a pipelined ring. At step t (0..N-2) rank r sends block
// (r-t) mod N to r+1 and receives block (r-t-1) mod N from r-1, segment by
// segment, forwarding each segment as soon as it is in. In framed mode each
// rank codes its own shard once (one frame per segment); the frames travel
// the ring unchanged (never recoded) and every rank decodes each of them
// into Out while the next ones arrive. In plain mode segments are received
// straight into Out and forwarded from there.
func AllGather(ctx context.Context, c collective.VarConn, a Args) error {
	const op = "allgather"
	r, err := newRun(op, "ring", c, &a, false)
	if err != nil {
		return err
	}
	if err := checkAllGather(r, &a, r.n, r.me); err != nil {
		return err
	}
	in := a.In[0]
	if r.n-1 > maxSteps {
		return fmt.Errorf("zcoll: %s: group of %d is too large for the ring", op, r.n)
	}
	total := 0
	for _, b := range a.Out {
		total += len(b)
	}
	local := func() error {
		if !bufs.Same(a.Out[r.me], in) {
			return r.copyData(a.Out[r.me], in)
		}
		return nil
	}
	if r.n == 1 || total == 0 {
		return local()
	}
	g, gctx := newGroup(ctx)
	r.gatherRing(g, gctx, a.Out, in)
	g.Go(local) // no other goroutine writes Out[me]
	return g.Wait()
}

// checkAllGather validates an all-gather's operands on rank me of n
// (AllGather's contract); r checks the lengths against its framing.
func checkAllGather(r *run, a *Args, n, me int) error {
	if err := need(r.op, "In", len(a.In), 1); err != nil {
		return err
	}
	if err := need(r.op, "Out", len(a.Out), n); err != nil {
		return err
	}
	if len(a.Out[me]) != len(a.In[0]) {
		return fmt.Errorf("zcoll: %s: In[0] has %d bytes, Out[%d] %d", r.op, len(a.In[0]), me, len(a.Out[me]))
	}
	return r.wholeElements(a.Out...)
}

// gatherRing starts, in sp, the ring all-gather of blocks dst (dst[b] is
// where block b lands; dst[me] is not written) with this rank's block read
// from src, at steps 0 .. N-2.
func (r *run) gatherRing(sp spawner, ctx context.Context, dst [][]byte, src []byte) {
	n, me := r.n, r.me
	next := (me + 1) % n
	cuts := make([]cut, n)
	for b := range n {
		cuts[b] = r.cut(len(dst[b]))
	}
	cuts[me] = r.cut(len(src))
	// This rank's block: step 0, coded once.
	own := cuts[me]
	if own.n > 0 {
		if !r.framed {
			sp.Go(func() error {
				for k := range own.n {
					if err := r.send(ctx, next, 0, k, own.of(src, k)); err != nil {
						return err
					}
				}
				return nil
			})
		} else {
			q := make(chan []byte, sendDepth)
			sp.Go(func() error {
				for k := range own.n {
					f, err := r.encodeFrame(own.of(src, k))
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
				for k := range own.n {
					f, err := workgroup.Take(ctx, q)
					if err != nil {
						return err
					}
					if err := r.send(ctx, next, 0, k, f); err != nil {
						return err
					}
					r.co.PutMsg(f)
				}
				return nil
			})
		}
	}
	// Everything received: block (me-t-1) mod n at step t, forwarded at
	// step t+1 unless it has gone round (t == n-2). The steps overlap (the
	// predecessor forwards while it still sends its own block), so each has
	// its own receivers.
	w := windowFor(r.cut(max(len(src), 1)).size, n-1, r.framed)
	for t := range n - 1 {
		b := ((me-t-1)%n + n) % n
		workgroup.Spread(sp, w, cuts[b].n, func(k int) error {
			return r.ringRecv(ctx, t, k, cuts[b].of(dst[b], k))
		})
	}
}

// ringRecv receives segment k of the block of ring step t into seg (decoding
// it in framed mode) and forwards it unless the block has gone round.
func (r *run) ringRecv(ctx context.Context, t, k int, seg []byte) error {
	n := r.n
	next, prev := (r.me+1)%n, (r.me+n-1)%n
	if !r.framed {
		if err := r.recv(ctx, prev, t, k, seg); err != nil {
			return err
		}
		if t < n-2 {
			return r.send(ctx, next, t+1, k, seg)
		}
		return nil
	}
	var forward func(frame []byte) error
	if t < n-2 {
		forward = func(frame []byte) error { return r.send(ctx, next, t+1, k, frame) }
	}
	return r.recvFrame(ctx, prev, t, k, seg, forward)
}

// recvSegment receives segment k from peer at step into seg, decoding it in
// framed mode.
func (r *run) recvSegment(ctx context.Context, peer, step, k int, seg []byte) error {
	if !r.framed {
		return r.recv(ctx, peer, step, k, seg)
	}
	return r.recvFrame(ctx, peer, step, k, seg, nil)
}

// recvFrame receives one frame from peer, passes it to forward (if not nil)
// and decodes it into seg.
func (r *run) recvFrame(ctx context.Context, peer, step, k int, seg []byte, forward func(frame []byte) error) error {
	buf := r.co.Msg(codec.MaxEncodedLen(len(seg), r.dt))
	defer r.co.PutMsg(buf)
	nb, err := r.recvUpTo(ctx, peer, step, k, buf)
	if err != nil {
		return err
	}
	frame := buf[:nb]
	if forward != nil {
		if err := forward(frame); err != nil {
			return err
		}
	}
	if err := decodeFrame(r.co, r.st, seg, frame, r.dt); err != nil {
		return r.wrap("recv", peer, step, k, err)
	}
	return nil
}
