package zcoll

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/transport"
)

// HierAllToAll is AllToAll (same contract: uneven splits, empty blocks)
// run rail-aligned over hosts h, as NCCL's PXN and ZeRO++'s qgZ do:
//
//  1. inside each host, uncoded, every rank hands local rank l its blocks
//     for the ranks of local index l (rail l): the one on its own host is
//     delivered; those for other hosts are gathered on local rank l into
//     one bundle per host, in local-rank order;
//  2. on each rail, across hosts, local rank l sends host g's bundle (coded
//     as the Plan says) to local rank l of host g, the destination of every
//     block in it. The scatter inside the receiving host that a three-stage
//     scheme ends with is empty: stage 1 already routed each block to its
//     destination's rail.
//
// A host link carries the bytes its host sends off-host, once, as the flat
// algorithm's do, but in one stream per rail and host pair (R per pair of
// hosts, the rails in parallel) where the flat one has R*R, each R times
// larger on average: fewer, larger frames to code and send.
//
// Block lengths are known only at a block's two ends, so each stage's
// lengths travel first: inside a host, each rank tells each local peer the
// lengths of its blocks for that peer's rail (8*H bytes); on the rail,
// each bundle is preceded by its R block lengths (8*R bytes, uncoded),
// sent as soon as stage 1's lengths are known. Every receive is sized by
// the sender's lengths, so a wrong split stalls no one: the data all
// flows, and the destination, which checks every block against its Out,
// fails with a length mismatch naming the sender (as the flat algorithm's
// transport does), leaving that block of Out untouched.
func HierAllToAll(ctx context.Context, c collective.VarConn, a Args, h Hosts) error {
	const op = "alltoall"
	x, err := newHier(op, c, &a, h, true)
	if err != nil {
		return err
	}
	n, me := c.Size(), c.Rank()
	if err := need(op, "In", len(a.In), n); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), n); err != nil {
		return err
	}
	if len(a.In[me]) != len(a.Out[me]) {
		return fmt.Errorf("zcoll: %s: In[%d] has %d bytes, Out[%d] %d", op, me, len(a.In[me]), me, len(a.Out[me]))
	}
	s := &a2aHier{x: x, a: &a, H: len(h), R: len(h[0])}
	// phases: 0 lengths inside the host, 1 blocks inside the host, 2 bundle
	// lengths on the rail, 3 bundles on the rail (coded)
	runs := make([]*run, 4)
	for p := range runs {
		if runs[p], err = x.run(p, s.phaseRanks(p), s.phaseMe(p), p == 3); err != nil {
			return err
		}
	}
	if err := runs[3].wholeElements(append(append([][]byte(nil), a.In...), a.Out...)...); err != nil {
		return err
	}
	defer s.free()
	if err := s.lengths(ctx, runs[0]); err != nil {
		return err
	}
	g, gctx := newIndependentGroup(ctx)
	s.start(g, gctx, runs[1], runs[2], runs[3])
	err = g.Wait()
	for _, xc := range s.xs {
		xc.done()
	}
	if err != nil {
		return err
	}
	return s.deliver()
}

// a2aHier is one rank's state of a HierAllToAll. Host g's rank of this
// rank's local index is "host g's rail peer"; m is a local index.
type a2aHier struct {
	x    *hier
	a    *Args
	H, R int
	lens [][]int    // lens[m][g]: bytes local rank m sends host g's rail peer
	dst  [][][]byte // dst[m][g]: where this rank receives that block
	out  [][]byte   // out[g]: the bundle for host g (nil for this host)
	got  [][]int    // got[g][m]: bytes host g's local rank m sends this rank
	in   [][]byte   // in[g]: the bundle from host g
	xs   []*exchange
	pool [][]byte // scratch to return
	bad  []error  // wrong splits found in stage 1, by local index
}

func (s *a2aHier) phaseRanks(p int) []int {
	if p < 2 {
		return s.x.h[s.x.host]
	}
	return s.x.h.rail(s.x.local)
}

func (s *a2aHier) phaseMe(p int) int {
	if p < 2 {
		return s.x.local
	}
	return s.x.host
}

// rank is the group rank of local index m on host g.
func (s *a2aHier) rank(g, m int) int { return s.x.h[g][m] }

func (s *a2aHier) scratch(n int) []byte {
	if n == 0 {
		return nil
	}
	b := s.a.Pool.Get(n)
	s.pool = append(s.pool, b)
	return b
}

func (s *a2aHier) free() {
	for _, b := range append(s.pool, s.in...) {
		if b != nil {
			s.a.Pool.Put(b)
		}
	}
}

// lengths is stage 1's length exchange inside the host; it then lays out
// where each block lands.
func (s *a2aHier) lengths(ctx context.Context, r *run) error {
	H, R, me := s.H, s.R, s.x.local
	mine := func(p int) []byte { // my lengths for local rank p's rail
		b := make([]byte, 8*H)
		for g := range H {
			binary.LittleEndian.PutUint64(b[8*g:], uint64(len(s.a.In[s.rank(g, p)])))
		}
		return b
	}
	hdrs := make([][]byte, R)
	g, gctx := newGroup(ctx)
	for p := range R {
		if p == me {
			hdrs[p] = mine(p)
			continue
		}
		hdrs[p] = make([]byte, 8*H)
		g.Go(func() error { return r.send(gctx, p, 0, 0, mine(p)) })
		g.Go(func() error { return r.recv(gctx, p, 0, 0, hdrs[p]) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	s.lens, s.dst, s.out, s.bad = make([][]int, R), make([][][]byte, R), make([][]byte, H), make([]error, R)
	for m := range R {
		s.lens[m] = make([]int, H)
		for g := range H {
			s.lens[m][g] = int(binary.LittleEndian.Uint64(hdrs[m][8*g:]))
		}
	}
	for g := range H {
		if g == s.x.host {
			continue
		}
		total := 0
		for m := range R {
			total += s.lens[m][g]
		}
		s.out[g] = s.scratch(total)
	}
	for m := range R {
		s.dst[m] = make([][]byte, H)
		for g := range H {
			if g != s.x.host {
				off := 0
				for k := range m {
					off += s.lens[k][g]
				}
				s.dst[m][g] = s.out[g][off : off+s.lens[m][g]]
				continue
			}
			want := s.a.Out[s.rank(g, m)]
			if s.lens[m][g] == len(want) {
				s.dst[m][g] = want
				continue
			}
			s.bad[m] = s.mismatch(s.rank(g, m), len(want), s.lens[m][g])
			s.dst[m][g] = s.scratch(s.lens[m][g])
		}
	}
	return nil
}

// mismatch is the error of a block from rank src of got bytes where Out
// has want.
func (s *a2aHier) mismatch(src, want, got int) error {
	return &collective.Error{Op: "alltoall", Algo: "hierarchical", Action: "recv", Peer: src,
		Err: &transport.MismatchError{Peer: src, WantLen: uint64(want), GotLen: uint64(got)}}
}

// start starts, in g, stage 1's blocks (phase run intra), the bundles'
// lengths (hdr) and, as each bundle fills, stage 2 (rail).
func (s *a2aHier) start(g *group, ctx context.Context, intra, hdr, rail *run) {
	H, R, me, host := s.H, s.R, s.x.local, s.x.host
	for p := range R {
		if p == me {
			continue
		}
		for h := range H { // step h: the block for host h's rail peer
			in := s.a.In[s.rank(h, p)]
			intra.outbound(g, ctx, p, h, intra.cut(len(in)), in, nil)
		}
	}
	recvBlock := func(sp spawner, ctx context.Context, m, h int) {
		c, b := intra.cut(s.lens[m][h]), s.dst[m][h]
		intra.inbound(sp, ctx, m, h, c, func(k int) (msg, error) { return msg{buf: c.of(b, k)}, nil }, false)
	}
	for h := range H {
		if h == host {
			for m := range R {
				if m != me {
					recvBlock(g, ctx, m, h)
				}
			}
			if own := s.a.In[s.rank(h, me)]; !bufs.Same(s.dst[me][h], own) {
				copy(s.dst[me][h], own)
			}
			continue
		}
		copy(s.dst[me][h], s.a.In[s.rank(h, me)])
		lens := make([]byte, 8*R)
		for m := range R {
			binary.LittleEndian.PutUint64(lens[8*m:], uint64(s.lens[m][h]))
		}
		g.Go(func() error { return hdr.send(ctx, h, 0, 0, lens) })
		// the bundle leaves once all of it is here (an encoder reads ahead
		// of its sends)
		g.Go(func() error {
			sg, sctx := newGroup(ctx)
			for m := range R {
				if m != me {
					recvBlock(sg, sctx, m, h)
				}
			}
			if err := sg.Wait(); err != nil {
				return err
			}
			rail.outbound(g, ctx, h, 0, rail.cut(len(s.out[h])), s.out[h], nil)
			return nil
		})
	}
	s.got, s.in = make([][]int, H), make([][]byte, H)
	for h := range H {
		if h == host {
			continue
		}
		// a corrupt frame fails this bundle only (as the flat algorithm's
		// exchanges fail independently)
		xc, xctx := newExchange(g, ctx)
		s.xs = append(s.xs, xc)
		g.Go(func() error {
			lens := make([]byte, 8*R)
			if err := hdr.recv(ctx, h, 0, 0, lens); err != nil {
				return err
			}
			s.got[h] = make([]int, R)
			total := 0
			for m := range R {
				s.got[h][m] = int(binary.LittleEndian.Uint64(lens[8*m:]))
				total += s.got[h][m]
			}
			var b []byte
			if total > 0 {
				b = s.a.Pool.Get(total) // returned by free
			}
			s.in[h] = b
			c := rail.cut(total)
			rail.inbound(xc, xctx, h, 0, c, func(k int) (msg, error) { return msg{buf: c.of(b, k)}, nil }, false)
			return nil
		})
	}
}

// deliver copies each bundle's blocks into Out, and returns the wrong
// split from the lowest sender rank, if any.
func (s *a2aHier) deliver() error {
	var first error
	from := -1
	fail := func(src int, err error) {
		if from < 0 || src < from {
			first, from = err, src
		}
	}
	for m, err := range s.bad {
		if err != nil {
			fail(s.rank(s.x.host, m), err)
		}
	}
	for h, lens := range s.got {
		off := 0
		for m, n := range lens {
			src := s.rank(h, m)
			if want := s.a.Out[src]; n == len(want) {
				copy(want, s.in[h][off:off+n])
			} else {
				fail(src, s.mismatch(src, len(want), n))
			}
			off += n
		}
	}
	return first
}
