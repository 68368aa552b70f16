package lossy

import (
	"context"
	"fmt"
	"runtime"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
	"github.com/zipccl/zipccl/backend/quant"
)

// pieceElems is about how many elements of each shard one piece of the
// pipeline carries: small enough that coding overlaps the transfers, large
// enough that each piece's all-gather is not latency-bound. (A variable:
// the tests make pieces small.)
var pieceElems = 1 << 16

// AllGather gathers every rank's In[0] into Out[r] coded with mode
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
func AllGather(ctx context.Context, c collective.Conn, a collective.Args, mode quant.Mode) error {
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
	return gatherCoded(ctx, c, a, mode, func(main []byte, lo, hi int) ([]byte, error) {
		return quant.Encode(main, nil, a.In[0][lo*es:hi*es], a.DType, mode, Block)
	})
}

// gatherCoded is AllGather's pipeline: code(main, lo, hi) codes elements
// [lo, hi) of this rank's shard (whole blocks) into main and returns the
// exact part; every rank decodes every shard into a.Out (a.DType).
func gatherCoded(ctx context.Context, c collective.Conn, a collective.Args, mode quant.Mode, code func(main []byte, lo, hi int) ([]byte, error)) error {
	n, me := c.Size(), c.Rank()
	es := a.DType.Size()
	blocks := make([]int, n)
	most := 0
	for r, out := range a.Out {
		blocks[r] = quant.Blocks(len(out)/es, Block)
		most = max(most, len(out)/es)
	}
	// Each piece uses two slot ranges (main, exact) of 2n steps, under the
	// reserved top bit of a slot's 16-bit step.
	stride := 2 * n
	pieces := min(max(1, (most+pieceElems-1)/pieceElems), (1<<14)/(2*stride))
	// piece p of rank r: its blocks [lo, hi), as elements and bytes of Out[r]
	span := func(r, p int) (lo, hi int) {
		numel := len(a.Out[r]) / es
		return min(numel, blocks[r]*p/pieces*Block), min(numel, blocks[r]*(p+1)/pieces*Block)
	}

	g, gctx := workgroup.New(ctx, "lossy")
	type coded struct{ main, exact []byte }
	own := make(chan coded, pieces)
	g.Go(func() error { // this rank's pieces, coded ahead of the transfers
		for p := range pieces {
			lo, hi := span(me, p)
			m := a.Pool.Get(quant.MainLen(mode, hi-lo, Block))
			ex, err := code(m, lo, hi)
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
						mains[r] = a.Pool.Get(quant.MainLen(mode, hi-lo, Block))
					}
				}
				exacts, err := gatherPiece(gctx, stepOffset{c, uint32(2 * p * stride)}, a, mains, mine.exact, stride)
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
func gatherPiece(ctx context.Context, c collective.Conn, a collective.Args, mains [][]byte, exact []byte, stride int) ([][]byte, error) {
	me := c.Rank()
	if err := collective.AllGather(ctx, c, collective.Args{DType: dtype.UInt8, In: [][]byte{mains[me]}, Out: mains, Pool: a.Pool, Local: a.Local}); err != nil {
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
	second := stepOffset{c, uint32(stride)}
	return exacts, collective.AllGather(ctx, second, collective.Args{DType: dtype.UInt8, In: [][]byte{exact}, Out: exacts, Pool: a.Pool, Local: a.Local})
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
