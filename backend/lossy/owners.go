package lossy

import (
	"context"
	"fmt"
	"sync"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

// toOwners is one lossy sum of every rank's contributions to every rank's
// shard, left on the shard's owner in float32: the reduce-scatter that
// reduce_scatter and all_reduce share.
//
// On hosts (a hierarchical layout: equal hosts of several ranks), ZeRO++'s
// qgZ structure with one quantization instead of two:
//
//  1. inside each host, the ranks sum exactly: local rank l receives from
//     its host's other ranks their contributions to the shards of rail l
//     (local index l on every host) as they are, and sums them in float32
//     in local-rank order: the host's partial sums;
//  2. on each rail, every rank codes each partial once (code) and sends it
//     to the shard's owner, which adds the partials in float32 in host
//     order, its own host's exact.
//
// Addressing each partial to its owner's rank is what ZeRO++'s slice
// reordering achieves for its contiguous all-to-all: rank r ends with
// shard r. Without hosts (one host, one rank per host, unequal hosts), step
// 1 is empty and step 2 runs on the whole group: a one-hop quantized
// all-to-all, each rank's own contribution exact on its owner.
//
// Both steps run in pieces of whole blocks of every shard, several in
// flight: the exact host sums of the next pieces, the coding and the
// rail transfers overlap.
type toOwners struct {
	c      collective.VarConn
	pool   *collective.Pool
	dt     dtype.DType
	code   Coding
	ins    [][]byte // per group rank j: this rank's contribution to j's shard
	numels []int    // elements of each rank's shard
	layout [][]int  // nil: one hop
	host   int      // this rank's host and local index (hosts only)
	local  int
	pieces int
}

// ownerPieceSteps is the message steps toOwners uses per piece (one per
// stage).
const ownerPieceSteps = 2

// maxPieces bounds the pieces of one operation: their steps stay under the
// reserved top bit of a slot's 16-bit step, with room for a second phase.
const maxPieces = 1 << 12

func newToOwners(c collective.VarConn, pool *collective.Pool, dt dtype.DType, code Coding, ins [][]byte, layout [][]int) (*toOwners, error) {
	n, me := c.Size(), c.Rank()
	es := dt.Size()
	o := &toOwners{c: c, pool: pool, dt: dt, code: code, ins: ins, numels: make([]int, n)}
	most := 0
	for j, in := range ins {
		if len(in)%es != 0 {
			return nil, fmt.Errorf("%d bytes for rank %d's shard are not whole %v elements", len(in), j, dt)
		}
		o.numels[j] = len(in) / es
		most = max(most, o.numels[j])
	}
	if hosts.Equal(layout, n) {
		o.layout = layout
		o.host, o.local = hosts.Where(layout, me)
	}
	o.pieces = min(max(1, (most+pieceElems-1)/pieceElems), maxPieces)
	return o, nil
}

// span is piece p of rank j's shard: elements [lo, hi), whole blocks.
func (o *toOwners) span(j, p int) (lo, hi int) {
	nb := quant.Blocks(o.numels[j], Unit)
	return min(o.numels[j], nb*p/o.pieces*Unit), min(o.numels[j], nb*(p+1)/o.pieces*Unit)
}

func (o *toOwners) in(j, p int) []byte {
	lo, hi := o.span(j, p)
	return o.ins[j][lo*o.dt.Size() : hi*o.dt.Size()]
}

// rail is the ranks the coded stage runs on, this rank among them at
// index at: its rail, or the whole group.
func (o *toOwners) rail() (ranks []int, at int) {
	if o.layout == nil {
		ranks = make([]int, o.c.Size())
		for i := range ranks {
			ranks[i] = i
		}
		return ranks, o.c.Rank()
	}
	return hosts.Rail(o.layout, o.local), o.host
}

// run sums this rank's shard piece by piece in float32 and hands each
// piece's sum to done as soon as it is complete: piece p, elements
// [lo, lo+len(sum)) of the shard. With acc (numels[me] elements) the sums are its pieces;
// without, scratch that done must not keep.
func (o *toOwners) run(ctx context.Context, acc []float32, done func(p, lo int, sum []float32)) error {
	me := o.c.Rank()
	if acc != nil && len(acc) != o.numels[me] {
		return fmt.Errorf("accumulator of %d elements for a shard of %d", len(acc), o.numels[me])
	}
	g, gctx := workgroup.New(ctx, "lossy")
	inflight := make(chan struct{}, 3)
	g.Go(func() error {
		for p := range o.pieces {
			if err := workgroup.Put(gctx, inflight, struct{}{}); err != nil {
				return err
			}
			g.Go(func() error {
				defer func() { <-inflight }()
				return o.piece(gctx, p, acc, done)
			})
		}
		return nil
	})
	return g.Wait()
}

// piece runs both stages of piece p.
func (o *toOwners) piece(ctx context.Context, p int, acc []float32, done func(p, lo int, sum []float32)) error {
	rail, at := o.rail()
	// parts[i]: this rank's contribution to rail[i]'s piece, as dtype
	// bytes (one hop) or a host's float32 partial sum.
	parts := make([][]byte, len(rail))
	partDT := o.dt
	if o.layout == nil {
		for i, r := range rail {
			parts[i] = o.in(r, p)
		}
	} else {
		partDT = dtype.Float32
		sums, err := o.hostSums(ctx, p)
		if err != nil {
			return err
		}
		defer func() {
			for _, s := range sums {
				putF32(s)
			}
		}()
		for i := range rail {
			parts[i] = bufs.Float32Bytes(sums[i])
		}
	}
	lo, hi := o.span(o.c.Rank(), p)
	var mine []float32
	if acc != nil {
		mine = acc[lo:hi]
	} else {
		mine = getF32(hi - lo)
		defer putF32(mine)
	}
	got := make([][]byte, len(rail)) // rail[i]'s coded partial of this rank's piece
	mainLen := quant.MainLen(o.code.Mode, hi-lo, o.code.Block)
	g, gctx := workgroup.New(ctx, "lossy")
	for i, r := range rail {
		if i == at {
			continue
		}
		g.Go(func() error { // code and send rail[i]'s piece
			rlo, rhi := o.span(r, p)
			m := o.pool.Get(quant.MainLen(o.code.Mode, rhi-rlo, o.code.Block))
			defer o.pool.Put(m)
			ex, err := quant.Encode(m, nil, parts[i], partDT, o.code.Mode, o.code.Block)
			if err != nil {
				return err
			}
			return o.c.Send(gctx, r, collective.Slot(ownerPieceSteps*p+1, 0), m, ex)
		})
		g.Go(func() error {
			buf := o.pool.Get(mainLen + (hi-lo)*partDT.Size())
			k, err := o.c.RecvUpTo(gctx, r, collective.Slot(ownerPieceSteps*p+1, 0), buf)
			if err != nil {
				o.pool.Put(buf)
				return err
			}
			if k < mainLen {
				o.pool.Put(buf)
				return fmt.Errorf("rank %d's coded piece: %d bytes, shorter than its %d-byte main part", r, k, mainLen)
			}
			got[i] = buf[:k]
			return nil
		})
	}
	err := g.Wait()
	defer func() {
		for _, b := range got {
			if b != nil {
				o.pool.Put(b[:cap(b)])
			}
		}
	}()
	if err != nil {
		return err
	}
	for i, r := range rail { // in rail order, this rank's own part exact
		if i == at {
			addExact(partDT, mine, parts[i], i == 0)
			continue
		}
		if err := quant.Accumulate(mine, got[i][:mainLen], got[i][mainLen:], i == 0); err != nil {
			return fmt.Errorf("rank %d's coded piece: %w", r, err)
		}
	}
	if done != nil {
		done(p, lo, mine)
	}
	return nil
}

// f32Pool holds the pieces' float32 scratch.
var f32Pool sync.Pool

func getF32(n int) []float32 {
	if b, ok := f32Pool.Get().(*[]float32); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]float32, n, max(n, pieceElems))
}

func putF32(b []float32) { f32Pool.Put(&b) }

// hostSums is step 1 for piece p: this host's exact float32 sums of the
// pieces of rail l's shards, one per host, in local-rank order.
func (o *toOwners) hostSums(ctx context.Context, p int) ([][]float32, error) {
	H, mine := len(o.layout), o.layout[o.host]
	es := o.dt.Size()
	// from[l']: local rank l''s contributions to rail l's pieces, host by
	// host, back to back (this rank's own: read in place)
	from := make([][]byte, len(mine))
	size := 0
	for h := range H {
		size += len(o.in(o.layout[h][o.local], p))
	}
	g, gctx := workgroup.New(ctx, "lossy")
	for l, r := range mine {
		if l == o.local {
			continue
		}
		g.Go(func() error {
			var out [][]byte
			for h := range H {
				out = append(out, o.in(o.layout[h][l], p))
			}
			return o.c.Send(gctx, r, collective.Slot(ownerPieceSteps*p, 0), out...)
		})
		g.Go(func() error {
			from[l] = o.pool.Get(size)
			return o.c.Recv(gctx, r, collective.Slot(ownerPieceSteps*p, 0), from[l])
		})
	}
	err := g.Wait()
	defer func() {
		for _, b := range from {
			if b != nil {
				o.pool.Put(b)
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	sums := make([][]float32, H) // the caller's to putF32
	off := 0
	for h := range H {
		r := o.layout[h][o.local]
		lo, hi := o.span(r, p)
		sums[h] = getF32(hi - lo)
		for l := range mine {
			src := o.in(r, p)
			if l != o.local {
				src = from[l][off : off+(hi-lo)*es]
			}
			addExact(o.dt, sums[h], src, l == 0)
		}
		off += (hi - lo) * es
	}
	return sums, nil
}

// addExact adds src's elements (dt) to acc in float32, or with first sets
// acc to them.
func addExact(dt dtype.DType, acc []float32, src []byte, first bool) {
	if dt == dtype.Float32 {
		xs := bufs.Float32s(src)
		if first {
			copy(acc, xs)
			return
		}
		for i, v := range xs {
			acc[i] += v
		}
		return
	}
	if first {
		reduce.Widen(dt, acc, src)
		return
	}
	reduce.Accum(dt, reduce.Sum, acc, src)
}

// finish writes acc, divided by div when it is more than 1 (AVG), into dst
// as dt: one rounding.
func finish(dt dtype.DType, dst []byte, acc []float32, div int) {
	divide(acc, div)
	if dt != dtype.Float32 {
		reduce.Narrow(dt, dst, acc)
		return
	}
	copy(dst, bufs.Float32Bytes(acc))
}

// divide divides acc by div when it is more than 1 (AVG), in float32, as
// torch's div_ of a float tensor does.
func divide(acc []float32, div int) {
	if div <= 1 {
		return
	}
	d := float32(div)
	for i := range acc {
		acc[i] /= d
	}
}
