package zcoll

import (
	"context"

	"github.com/zipccl/zipccl/backend/collective"
)

// Reduce-scatter and all-gather on hosts of unequal size. The rails are
// the local indices 0..L-1 that every host has (L = Hosts.Rails). A rank
// of local index j >= L (a "spare") rides on rail j mod L: its host's rank
// of that local index carries its block across the hosts, and hands it on
// inside the host. The blocks of one host that ride on one rail form a
// bundle, in local order, and cross the hosts as one message, so each
// host's NIC carries each of its blocks once per other host, as with
// equal hosts. The reduction order is the equal hosts' one: over the
// host's ranks in local order, then over the hosts in host order.

// bundle is the local indices of host h that ride on rail l, ascending.
func (h Hosts) bundle(host, l int) []int {
	var out []int
	for j := l; j < len(h[host]); j += h.Rails() {
		out = append(out, j)
	}
	return out
}

// bundleBufs is, for rail l of host, the buffers of bs (indexed by group
// rank) of the ranks in its bundle.
func (h Hosts) bundleBufs(bs [][]byte, host, l int) [][]byte {
	js := h.bundle(host, l)
	out := make([][]byte, len(js))
	for i, j := range js {
		out[i] = bs[h[host][j]]
	}
	return out
}

// packed is one contiguous buffer holding parts back to back: the part
// itself when there is one, else scratch from pool (put back by release).
type packed struct {
	buf     []byte
	parts   [][]byte
	scratch bool
}

func pack(pool *collective.Pool, parts [][]byte, fill bool) *packed {
	if len(parts) == 1 {
		return &packed{buf: parts[0], parts: parts}
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	p := &packed{buf: pool.Get(n), parts: parts, scratch: true}
	if fill {
		off := 0
		for _, part := range parts {
			off += copy(p.buf[off:], part)
		}
	}
	return p
}

// unpack copies the packed buffer back into its parts.
func (p *packed) unpack() {
	if !p.scratch {
		return
	}
	off := 0
	for _, part := range p.parts {
		off += copy(part, p.buf[off:])
	}
}

func (p *packed) release(pool *collective.Pool) {
	if p.scratch {
		pool.Put(p.buf)
	}
}

// hierReduceScatterUnequal is HierReduceScatter on hosts of unequal size:
// inside this host, per destination host d, a reduce-scatter leaves on
// local rank l < L the host's partial of d's bundle l; on each rail a
// reduce-scatter of those partials leaves on each host's rank l the sums
// of its bundle; it keeps its own block and sends each spare of the
// bundle its own.
func hierReduceScatterUnequal(ctx context.Context, x *hier, out []byte) error {
	a, h := x.a, x.h
	H, L := len(h), h.Rails()
	rail := x.local < L
	// partials[d]: this rank's partial of host d's bundle on its rail
	partials := make([]*packed, H)
	defer func() {
		for _, p := range partials {
			if p != nil {
				p.release(a.Pool)
			}
		}
	}()
	err := each(ctx, H, func(ctx context.Context, d int) error {
		r, err := x.intra(d)
		if err != nil {
			return err
		}
		contrib := make([][]byte, len(h[x.host])) // this rank's part of each chunk
		var mine []byte
		for l := range contrib {
			if l >= L {
				continue // spares own no chunk
			}
			p := pack(a.Pool, h.bundleBufs(a.In, d, l), true)
			defer p.release(a.Pool)
			contrib[l] = p.buf
			if l == x.local {
				partials[d] = &packed{buf: a.Pool.Get(len(p.buf)), scratch: true}
				mine = partials[d].buf
			}
		}
		return r.reduceScatter(ctx, a.Op, contrib, mine, rsHooks{})
	})
	if err != nil || !rail {
		if err == nil {
			err = x.recvFromCarrier(ctx, H+1, out)
		}
		return err
	}
	// on the rail: host d's partial goes to host d
	r, err := x.inter(H)
	if err != nil {
		return err
	}
	chunks := make([][]byte, H)
	for d := range H {
		chunks[d] = partials[d].buf
	}
	sums := out // this rank's bundle, its own block first
	if nb := len(h.bundle(x.host, x.local)); nb > 1 {
		sums = a.Pool.Get(nb * len(out))
		defer a.Pool.Put(sums)
	}
	if err := r.reduceScatter(ctx, a.Op, chunks, sums, rsHooks{}); err != nil {
		return err
	}
	return x.sendToSpares(ctx, H+1, out, sums, len(out))
}

// send and recv move one message to or from local rank j of this host at
// phase, their errors naming the peer's group rank.
func (x *hier) send(ctx context.Context, phase, j int, buf []byte) error {
	if err := x.phase(phase, x.h[x.host], x.local).Send(ctx, j, 0, buf); err != nil {
		return &collective.Error{Op: x.op, Algo: "hierarchical", Action: "send", Peer: x.h[x.host][j], Step: phase, Err: err}
	}
	return nil
}

func (x *hier) recv(ctx context.Context, phase, j int, buf []byte) error {
	if err := x.phase(phase, x.h[x.host], x.local).Recv(ctx, j, 0, buf); err != nil {
		return &collective.Error{Op: x.op, Algo: "hierarchical", Action: "recv", Peer: x.h[x.host][j], Step: phase, Err: err}
	}
	return nil
}

// sendToSpares, on a rail rank, copies its own block (the first of the
// bundle in bundled) to out and sends each spare of its bundle its block
// (the next ones, size bytes each), at phase.
func (x *hier) sendToSpares(ctx context.Context, phase int, out, bundled []byte, size int) error {
	js := x.h.bundle(x.host, x.local)
	if len(js) == 1 {
		return nil // bundled is out
	}
	copy(out, bundled[:size])
	g, gctx := newGroup(ctx)
	for i, j := range js[1:] {
		blk := bundled[(i+1)*size : (i+2)*size]
		g.Go(func() error { return x.send(gctx, phase, j, blk) })
	}
	return g.Wait()
}

// recvFromCarrier, on a spare, receives its block from its rail's rank of
// its host at phase.
func (x *hier) recvFromCarrier(ctx context.Context, phase int, out []byte) error {
	return x.recv(ctx, phase, x.local%x.h.Rails(), out)
}

// hierAllGatherUnequal is HierAllGather on hosts of unequal size: each
// spare sends its shard to its rail's rank of its host; on each rail an
// all-gather of the hosts' bundles; then inside each host, per source host
// s, an all-gather of what each rail brought from s (the own host's
// included, for the spares' shards).
func hierAllGatherUnequal(ctx context.Context, x *hier) error {
	a, h := x.a, x.h
	H, L := len(h), h.Rails()
	me := x.h[x.host][x.local]
	if x.local >= L {
		if err := x.send(ctx, 0, x.local%L, a.Out[me]); err != nil {
			return err
		}
	} else {
		g, gctx := newGroup(ctx)
		for _, j := range h.bundle(x.host, x.local)[1:] {
			g.Go(func() error { return x.recv(gctx, 0, j, a.Out[h[x.host][j]]) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
		// on the rail: every host's bundle of this rail to every host
		r, err := x.inter(1)
		if err != nil {
			return err
		}
		ps := make([]*packed, H)
		dst := make([][]byte, H)
		for d := range H {
			ps[d] = pack(a.Pool, h.bundleBufs(a.Out, d, x.local), d == x.host)
			defer ps[d].release(a.Pool)
			dst[d] = ps[d].buf
		}
		if err := gather(ctx, r, dst); err != nil {
			return err
		}
		for d := range H {
			if d != x.host {
				ps[d].unpack()
			}
		}
	}
	// inside the host, per source host s: rail rank l hands on s's bundle l
	return each(ctx, H, func(ctx context.Context, s int) error {
		r, err := x.intra(2 + s)
		if err != nil {
			return err
		}
		dst := make([][]byte, len(h[x.host]))
		for l := range dst {
			if l >= L {
				dst[l] = a.Out[me][:0] // spares bring nothing
				continue
			}
			p := pack(a.Pool, h.bundleBufs(a.Out, s, l), l == x.local)
			defer p.release(a.Pool)
			defer func() {
				if l != x.local {
					p.unpack()
				}
			}()
			dst[l] = p.buf
		}
		return gather(ctx, r, dst)
	})
}
