package lossy

import (
	"context"
	"fmt"
	"runtime"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
	"github.com/zipccl/zipccl/backend/quant"
)

// pieceElems is about how many elements of each shard one piece of the
// pipeline carries: small enough that coding overlaps the transfers, large
// enough that each piece's all-gather is not latency-bound. (A variable:
// the tests make pieces small.)
var pieceElems = 1 << 16

// AllGather gathers every rank's In[0] into Out[r] coded as code says
// (collective.AllGather's contract: every rank passes the same lengths).
// Each rank codes its shard once, and every rank, this one included,
// decodes every shard from the same bytes: the outputs are bitwise
// identical on every rank.
//
// The shards are cut into pieces of whole blocks (the same blocks as one
// message of the whole shard: the bytes do not depend on the cut). Piece by
// piece, the main parts travel in one all-gather and the exact parts (blocks
// holding NaN or Inf) in a second one, only when some rank has one; coding
// the next pieces and decoding the received ones overlap the transfers.
func AllGather(ctx context.Context, c collective.Conn, a collective.Args, code Coding, layout [][]int) error {
	n, me := c.Size(), c.Rank()
	if len(a.In) != 1 || len(a.Out) != n || len(a.Out[me]) != len(a.In[0]) {
		return fmt.Errorf("lossy: all_gather: want 1 input and %d outputs, In[0] as long as Out[%d]", n, me)
	}
	es := a.DType.Size()
	for r, out := range a.Out {
		if len(out)%es != 0 {
			return fmt.Errorf("lossy: all_gather: rank %d's %d bytes are not whole %v elements", r, len(out), a.DType)
		}
	}
	return gatherCoded(ctx, c, a, code, layout, func(main []byte, lo, hi int) ([]byte, error) {
		return quant.Encode(main, nil, a.In[0][lo*es:hi*es], a.DType, code.Mode, code.Block)
	})
}

// gatherCoded is AllGather's pipeline: encode(main, lo, hi) codes elements
// [lo, hi) of this rank's shard (whole blocks) into main and returns the
// exact part; every rank decodes every shard into a.Out (a.DType). On
// hosts (a hierarchical layout) the main parts travel in two stages: on
// each rail across hosts, then inside each host, so that each coded shard
// crosses to every other host once.
func gatherCoded(ctx context.Context, c collective.Conn, a collective.Args, code Coding, layout [][]int, encode func(main []byte, lo, hi int) ([]byte, error)) error {
	n, me := c.Size(), c.Rank()
	es := a.DType.Size()
	blocks := make([]int, n)
	most := 0
	for r, out := range a.Out {
		blocks[r] = quant.Blocks(len(out)/es, Unit)
		most = max(most, len(out)/es)
	}
	if !hosts.Equal(layout, n) {
		layout = nil
	}
	// Each piece uses three slot ranges (main on rails or on the group,
	// main inside hosts, exact) of 2n steps, under the reserved top bit of
	// a slot's 16-bit step.
	stride := 2 * n
	pieces := min(max(1, (most+pieceElems-1)/pieceElems), (1<<14)/(3*stride))
	// piece p of rank r: its blocks [lo, hi), as elements and bytes of Out[r]
	span := func(r, p int) (lo, hi int) {
		numel := len(a.Out[r]) / es
		return min(numel, blocks[r]*p/pieces*Unit), min(numel, blocks[r]*(p+1)/pieces*Unit)
	}

	g, gctx := workgroup.New(ctx, "lossy")
	type coded struct{ main, exact []byte }
	own := make(chan coded, pieces)
	g.Go(func() error { // this rank's pieces, coded ahead of the transfers
		for p := range pieces {
			lo, hi := span(me, p)
			m := a.Pool.Get(quant.MainLen(code.Mode, hi-lo, code.Block))
			ex, err := encode(m, lo, hi)
			if err != nil {
				return err
			}
			if err := workgroup.Put(gctx, own, coded{m, ex}); err != nil {
				return err
			}
		}
		return nil
	})
	// Two pieces in flight, so that one's transfers start while the
	// other's ring drains; decoding at most GOMAXPROCS pieces at once.
	inflight := make(chan struct{}, 2)
	decoders := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	g.Go(func() error {
		for p := range pieces {
			mine, err := workgroup.Take(gctx, own)
			if err != nil {
				return err
			}
			if err := workgroup.Put(gctx, inflight, struct{}{}); err != nil {
				return err
			}
			g.Go(func() error {
				mains := make([][]byte, n)
				for r := range n {
					if r == me {
						mains[r] = mine.main
					} else {
						lo, hi := span(r, p)
						mains[r] = a.Pool.Get(quant.MainLen(code.Mode, hi-lo, code.Block))
					}
				}
				exacts, err := gatherPiece(gctx, stepOffset{c, uint32(3 * p * stride)}, a, mains, mine.exact, layout, stride)
				<-inflight // transfers done: the next piece may start
				if err != nil {
					return err
				}
				if err := workgroup.Put(gctx, decoders, struct{}{}); err != nil {
					return err
				}
				defer func() { <-decoders }()
				for r := range n {
					lo, hi := span(r, p)
					if err := quant.Decode(a.Out[r][lo*es:hi*es], mains[r], exacts[r], a.DType); err != nil {
						return fmt.Errorf("lossy: all_gather: rank %d's shard: %w", r, err)
					}
					a.Pool.Put(mains[r])
				}
				return nil
			})
		}
		return nil
	})
	return g.Wait()
}

// gatherPiece all-gathers one piece's main parts (mains[me] filled, the
// others sized) and, when some rank has blocks that travel exact, their
// exact parts (the header of each main part says how long each is).
func gatherPiece(ctx context.Context, c collective.Conn, a collective.Args, mains [][]byte, exact []byte, layout [][]int, stride int) ([][]byte, error) {
	me := c.Rank()
	if err := gatherMains(ctx, c, a, mains, layout, stride); err != nil {
		return nil, err
	}
	exacts := make([][]byte, len(mains))
	some := false
	for r, m := range mains {
		h, err := quant.PeekHeader(m)
		if err != nil {
			return nil, fmt.Errorf("lossy: all_gather: rank %d's shard: %w", r, err)
		}
		if l := h.ExactLen(m); l > 0 {
			exacts[r] = make([]byte, l)
			some = true
		}
	}
	if !some {
		return exacts, nil
	}
	copy(exacts[me], exact)
	last := stepOffset{c, uint32(2 * stride)}
	return exacts, collective.AllGather(ctx, last, collective.Args{DType: dtype.UInt8, In: [][]byte{exact}, Out: exacts, Pool: a.Pool, Local: a.Local})
}

// gatherMains all-gathers the main parts: on the whole group, or on hosts
// first on this rank's rail (the main parts of its local index on every
// host), then inside the host, each local rank forwarding what its rail
// brought, back to back.
func gatherMains(ctx context.Context, c collective.Conn, a collective.Args, mains [][]byte, layout [][]int, stride int) error {
	me := c.Rank()
	u8 := collective.Args{DType: dtype.UInt8, Pool: a.Pool, Local: a.Local}
	if layout == nil {
		u8.In, u8.Out = [][]byte{mains[me]}, mains
		return collective.AllGather(ctx, c, u8)
	}
	host, local := hosts.Where(layout, me)
	rail := hosts.Rail(layout, local)
	u8.In, u8.Out = [][]byte{mains[me]}, bufs.Pick(mains, rail)
	if err := collective.AllGather(ctx, &view{c, rail, host, 0}, u8); err != nil {
		return err
	}
	// inside the host: local rank l sends its rail's main parts
	mine := layout[host]
	outs := make([][]byte, len(mine))
	for l := range mine {
		n := 0
		for _, r := range hosts.Rail(layout, l) {
			n += len(mains[r])
		}
		outs[l] = a.Pool.Get(n)
		defer a.Pool.Put(outs[l])
	}
	off := 0
	for _, r := range rail {
		off += copy(outs[local][off:], mains[r])
	}
	u8.In, u8.Out = [][]byte{outs[local]}, outs
	u8.Local = true // the ranks of one host
	if err := collective.AllGather(ctx, &view{c, mine, local, uint32(stride)}, u8); err != nil {
		return err
	}
	for l := range mine {
		if l == local {
			continue
		}
		off := 0
		for _, r := range hosts.Rail(layout, l) {
			off += copy(mains[r], outs[l][off:])
		}
	}
	return nil
}

// view is some ranks of the group's connection (this rank at index me),
// their slots' steps moved up by base.
type view struct {
	c     collective.Conn
	ranks []int
	me    int
	base  uint32
}

func (v *view) Rank() int { return v.me }
func (v *view) Size() int { return len(v.ranks) }
func (v *view) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	return v.c.Send(ctx, v.ranks[peer], slot+v.base<<16, bufs...)
}
func (v *view) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	return v.c.Recv(ctx, v.ranks[peer], slot+v.base<<16, buf)
}

// stepOffset moves an algorithm's slots up by base steps, so that the
// pipeline's collectives on one connection never meet each other's
// messages.
type stepOffset struct {
	collective.Conn
	base uint32
}

func (s stepOffset) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	return s.Conn.Send(ctx, peer, slot+s.base<<16, bufs...)
}

func (s stepOffset) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	return s.Conn.Recv(ctx, peer, slot+s.base<<16, buf)
}
