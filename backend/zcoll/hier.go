package zcoll

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// Hierarchical all-reduce, reduce-scatter and all-gather, for groups whose
// ranks sit on several hosts of several ranks each (NCCL's rail-aligned
// scheme). Inside a host the ranks exchange uncoded (memory, or loopback);
// across hosts only ranks of the same local index talk ("rails"), with the
// Plan's coding, so each host's NIC carries M*(H-1)/H bytes each way for an
// all-gather or reduce-scatter of M bytes, where the flat algorithms carry
// R times that.
//
// Reduction order (hierarchical reduce-scatter and all-reduce): every
// element is reduced on its owner in two stages, each as a flat
// reduce-scatter reduces (package doc: rank order; float32 accumulation and
// one rounding for the narrow float types):
//
//	partial(h) = x[h,0] op x[h,1] op ... op x[h,R-1]    over local ranks
//	result     = partial(0) op partial(1) op ... op partial(H-1)  over hosts
//
// so the narrow float types round twice, once per stage. The order depends
// only on the layout, never on the Plan: coding on and off give the same
// bits, and every rank the same bits (all-reduce copies each block from its
// owner).
//
// Message slots: each phase runs on a view of the group's connection with
// its own steps (phase*stride + the step its algorithm uses).

// Hosts is a group's ranks by host: Hosts[h][l] is the group rank of local
// rank l of host h.
type Hosts [][]int

// Hierarchical says whether h calls for the hierarchical algorithms on a
// group of n ranks: at least two hosts, some host with several ranks,
// every rank once, and the phases' message steps within a Slot. All-reduce
// and broadcast take hosts of any sizes; reduce-scatter, all-gather and
// all-to-all need Equal ones.
func (h Hosts) Hierarchical(n int) bool {
	return len(h) >= 2 && h.widest() >= 2 && hosts.Partition(h, n) && h.phases()*h.stride() < maxSteps
}

// Equal says whether every host holds the same number of ranks.
func (h Hosts) Equal() bool {
	return h.Rails() == h.widest()
}

// Rails is how many rails cross the hosts: the smallest host's rank count
// (local indices 0..Rails-1 exist on every host).
func (h Hosts) Rails() int {
	r := len(h[0])
	for _, host := range h {
		r = min(r, len(host))
	}
	return r
}

// widest is the largest host's rank count.
func (h Hosts) widest() int {
	r := 0
	for _, host := range h {
		r = max(r, len(host))
	}
	return r
}

// stride is the steps one phase may use: its algorithm runs on at most
// max(H, R) ranks.
func (h Hosts) stride() int { return max(len(h), h.widest()) + 2 }

// phases is the most phases an operation runs: per piece, all-gather's
// and reduce-scatter's H + 1, all-reduce's 3.
func (h Hosts) phases() int { return hierPieces * max(len(h)+1, 3) }

// where finds group rank me: its host and local index.
func (h Hosts) where(me int) (host, local int) { return hosts.Where(h, me) }

// rail is the ranks of local index l on every host, in host order.
func (h Hosts) rail(l int) []int { return hosts.Rail(h, l) }

// phaseConn is one phase's view of the group's connection: the ranks
// ranks (this rank among them, at index me), its slots' steps moved up by
// base.
type phaseConn struct {
	c     collective.VarConn
	ranks []int
	me    int
	base  uint32
}

func (p *phaseConn) Rank() int { return p.me }
func (p *phaseConn) Size() int { return len(p.ranks) }
func (p *phaseConn) slot(s uint32) uint32 {
	return s + p.base<<16
}
func (p *phaseConn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	return p.c.Send(ctx, p.ranks[peer], p.slot(slot), bufs...)
}
func (p *phaseConn) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	return p.c.Recv(ctx, p.ranks[peer], p.slot(slot), buf)
}
func (p *phaseConn) RecvUpTo(ctx context.Context, peer int, slot uint32, buf []byte) (int, error) {
	return p.c.RecvUpTo(ctx, p.ranks[peer], p.slot(slot), buf)
}

// hier is one hierarchical operation: the layout, this rank's place in it,
// and the operands.
type hier struct {
	op          string
	c           collective.VarConn
	h           Hosts
	host, local int
	es          int // element size: pieces and chunks are whole elements
	a           *Args
}

func newHier(op string, c collective.VarConn, a *Args, h Hosts, equal bool) (*hier, error) {
	if !h.Hierarchical(c.Size()) {
		return nil, fmt.Errorf("zcoll: %s: layout %v is not hierarchical for a group of %d", op, h, c.Size())
	}
	if equal && !h.Equal() {
		return nil, fmt.Errorf("zcoll: %s: the hierarchical algorithm needs hosts of equal size, not %v", op, h)
	}
	if _, dev := a.Coder.(DeviceMemory); dev {
		return nil, fmt.Errorf("zcoll: %s: the hierarchical algorithms run on host memory only", op)
	}
	host, local := h.where(c.Rank())
	return &hier{op: op, c: c, h: h, host: host, local: local, es: max(a.DType.Size(), 1), a: a}, nil
}

// phase is the connection of phase number phase over ranks (this rank at
// index me).
func (x *hier) phase(phase int, ranks []int, me int) *phaseConn {
	return &phaseConn{c: x.c, ranks: ranks, me: me, base: uint32(phase * x.h.stride())}
}

// run is phase number phase over ranks, coded as the Plan says across
// hosts and plain inside one.
func (x *hier) run(phase int, ranks []int, me int, across bool) (*run, error) {
	a := *x.a
	if !across {
		a.Plan = Plan{Segment: a.Plan.Segment}
	}
	return newRun(x.op, "hierarchical", x.phase(phase, ranks, me), &a, false)
}

// intra is phase number phase inside this rank's host.
func (x *hier) intra(phase int) (*run, error) { return x.run(phase, x.h[x.host], x.local, false) }

// inter is phase number phase on this rank's rail.
func (x *hier) inter(phase int) (*run, error) { return x.run(phase, x.h.rail(x.local), x.host, true) }

// each runs f(h) for every host h at once, the first error cancelling the
// rest.
func each(ctx context.Context, hosts int, f func(ctx context.Context, h int) error) error {
	g, gctx := newGroup(ctx)
	for h := range hosts {
		g.Go(func() error { return f(gctx, h) })
	}
	return g.Wait()
}

// pipeline runs stages[s](ctx, k) for every piece k < pieces and stage s,
// in order within a piece; a stage takes piece k only once it is through
// with piece k-1, so one piece crosses the hosts while the next is worked
// on inside them.
func pipeline(ctx context.Context, pieces int, stages ...func(ctx context.Context, k int) error) error {
	done := newGates(len(stages)) // done[s]: pieces stage s has finished
	g, gctx := newGroup(ctx)
	for k := range pieces {
		g.Go(func() error {
			for s, f := range stages {
				if k > 0 {
					if err := done[s].wait(gctx, k-1); err != nil {
						return err
					}
				}
				if err := f(gctx, k); err != nil {
					return err
				}
				done[s].advance()
			}
			return nil
		})
	}
	return g.Wait()
}

// hierPieces is how many pieces a large operation is pipelined in, each
// at least hierPieceMin bytes (a variable for the tests). The pieces
// change the messages, never the bits of a result.
const hierPieces = 4

var hierPieceMin = 4 << 20

// piecesOf is how many pieces an operation moving total bytes is cut in:
// the same on every rank, which all pass the same lengths.
func piecesOf(total int) int { return min(hierPieces, max(1, total/hierPieceMin)) }

// piece returns piece k of every buffer of bs, each cut into n pieces of
// whole elements of es bytes.
func piece(bs [][]byte, n, k, es int) [][]byte {
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = bufs.Split(b, n, es)[k]
	}
	return out
}

// gather is r's direct all-gather of dst[r.me] into dst.
func gather(ctx context.Context, r *run, dst [][]byte) error {
	g, gctx := newGroup(ctx)
	r.gatherDirect(g, gctx, 0, dst, dst[r.me], func(context.Context, int) error { return nil }, func(int) {})
	return g.Wait()
}

// HierAllReduce is AllReduce (same contract) run hierarchically over hosts
// h, of any sizes, the buffer pipelined in pieces. Each piece is cut into
// one chunk per rail (collective's split, chunk l for local index l; the
// local indices past the smallest host's own none), then: a reduce-scatter
// inside each host leaves the host's partial of chunk l on its local rank
// l; on each rail the two-shot AllReduce (coded as the Plan says) sums the
// hosts' partials; a direct all-gather inside each host hands every chunk
// to every rank. Each host's NIC carries 2*M*(H-1)/H bytes whatever its
// rank count.
func HierAllReduce(ctx context.Context, c collective.VarConn, a Args, h Hosts) error {
	const op = "allreduce"
	x, err := newHier(op, c, &a, h, false)
	if err != nil {
		return err
	}
	data, err := checkAllReduce(op, &a)
	if err != nil {
		return err
	}
	if !bufs.Same(a.In[0], data) {
		copy(data, a.In[0])
	}
	if len(data) == 0 {
		return nil
	}
	n := piecesOf(len(data))
	rails := h.Rails()
	chunks := func(k int) [][]byte {
		p := piece([][]byte{data}, n, k, x.es)[0]
		ch := bufs.Split(p, rails, x.es)
		for len(ch) < len(h[x.host]) {
			ch = append(ch, p[len(p):])
		}
		return ch
	}
	return pipeline(ctx, n,
		func(ctx context.Context, k int) error {
			r, err := x.intra(3 * k)
			if err != nil {
				return err
			}
			ch := chunks(k)
			return r.reduceScatter(ctx, a.Op, ch, ch[x.local], rsHooks{})
		},
		func(ctx context.Context, k int) error {
			if x.local >= rails {
				return nil // on no rail: its host's rails carry its chunks
			}
			mine := chunks(k)[x.local]
			rail := a
			rail.In, rail.Out = [][]byte{mine}, [][]byte{mine}
			return AllReduce(ctx, x.phase(3*k+1, h.rail(x.local), x.host), rail)
		},
		func(ctx context.Context, k int) error {
			r, err := x.intra(3*k + 2)
			if err != nil {
				return err
			}
			return gather(ctx, r, chunks(k))
		})
}

// HierReduceScatter is ReduceScatter (same contract) run hierarchically
// over hosts h, pipelined in pieces of the blocks: inside each host, a
// reduce-scatter per host h' leaves on local rank l the host's partial of
// the block of local rank l of h' (in scratch); then on each rail a
// reduce-scatter of those partials.
func HierReduceScatter(ctx context.Context, c collective.VarConn, a Args, h Hosts) error {
	const op = "reducescatter"
	x, err := newHier(op, c, &a, h, false)
	if err != nil {
		return err
	}
	out, err := checkReduceScatter(op, &a, c.Size(), c.Rank())
	if err != nil {
		return err
	}
	if len(out) == 0 {
		return nil
	}
	if !h.Equal() {
		return hierReduceScatterUnequal(ctx, x, out)
	}
	H := len(h)
	parts := make([][]byte, H) // In is read-only: the partials go to scratch
	for i := range parts {
		parts[i] = a.Pool.Get(len(out))
		defer a.Pool.Put(parts[i])
	}
	n := piecesOf(len(out) * c.Size())
	return pipeline(ctx, n,
		func(ctx context.Context, k int) error {
			in, ps := piece(a.In, n, k, x.es), piece(parts, n, k, x.es)
			return each(ctx, H, func(ctx context.Context, dst int) error {
				r, err := x.intra(k*(H+1) + dst)
				if err != nil {
					return err
				}
				return r.reduceScatter(ctx, a.Op, bufs.Pick(in, h[dst]), ps[dst], rsHooks{})
			})
		},
		func(ctx context.Context, k int) error {
			r, err := x.inter(k*(H+1) + H)
			if err != nil {
				return err
			}
			return r.reduceScatter(ctx, a.Op, piece(parts, n, k, x.es), piece([][]byte{out}, n, k, x.es)[0], rsHooks{})
		})
}

// HierAllGather is AllGather (same contract) run hierarchically over hosts
// h, pipelined in pieces of the shards: on each rail an all-gather (coded
// as the Plan says) of the shards of that local index, then inside each
// host an all-gather per host h' of what the rails brought from h'.
func HierAllGather(ctx context.Context, c collective.VarConn, a Args, h Hosts) error {
	const op = "allgather"
	x, err := newHier(op, c, &a, h, false)
	if err != nil {
		return err
	}
	r, err := x.intra(0) // for the checks: a spare of unequal hosts has no rail
	if err != nil {
		return err
	}
	me := c.Rank()
	if err := checkAllGather(r, &a, c.Size(), me); err != nil {
		return err
	}
	if !bufs.Same(a.Out[me], a.In[0]) {
		copy(a.Out[me], a.In[0])
	}
	if !h.Equal() {
		return hierAllGatherUnequal(ctx, x)
	}
	H, total := len(h), 0
	for _, b := range a.Out {
		total += len(b)
	}
	n := piecesOf(total)
	return pipeline(ctx, n,
		func(ctx context.Context, k int) error {
			r, err := x.inter(k * (H + 1))
			if err != nil {
				return err
			}
			return gather(ctx, r, piece(bufs.Pick(a.Out, h.rail(x.local)), n, k, x.es))
		},
		func(ctx context.Context, k int) error {
			return each(ctx, H, func(ctx context.Context, src int) error {
				r, err := x.intra(k*(H+1) + 1 + src)
				if err != nil {
					return err
				}
				return gather(ctx, r, piece(bufs.Pick(a.Out, h[src]), n, k, x.es))
			})
		})
}
