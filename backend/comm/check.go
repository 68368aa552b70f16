package comm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/zipccl/zipccl/backend/transport"
)

// The agreement check makes every rank learn whether all ranks called the
// same op, so a mismatch fails the op on every rank with a message naming
// both sides, never a hang. It is a dissemination all-reduce of
// (smallest descriptor, its rank, largest descriptor, its rank): in round r
// each rank sends to rank+2^r and receives from rank-2^r, so after
// ceil(log2 N) rounds every rank has folded in every rank's descriptor, and
// the smallest equals the largest exactly when all agree. It runs alongside
// the data movement, so it costs latency only on ops too small to hide it.
// Barrier is this check alone.

// checkSlot marks the check's messages (the top bit is reserved for the
// engine).
const checkSlot = 0x80000000

type vote struct {
	desc transport.Desc
	rank uint32
}

const voteLen = transport.DescLen + 4

func (v *vote) put(b []byte) {
	copy(b, v.desc[:])
	binary.LittleEndian.PutUint32(b[transport.DescLen:], v.rank)
}

func (v *vote) get(b []byte) {
	copy(v.desc[:], b)
	v.rank = binary.LittleEndian.Uint32(b[transport.DescLen:])
}

func (c *Comm) agree(ctx context.Context, conn *opConn, mine descFields) error {
	n, me := c.cfg.Size, c.cfg.Rank
	lo := vote{desc: conn.desc, rank: uint32(me)}
	hi := lo
	var out, in [2 * voteLen]byte
	for r, dist := 0, 1; dist < n; r, dist = r+1, dist*2 {
		lo.put(out[:])
		hi.put(out[voteLen:])
		to, from := (me+dist)%n, (me-dist+n)%n
		key := transport.Key{Kind: transport.Coll, Seq: conn.seq, Slot: checkSlot | uint32(r)}
		// The check messages carry the sender's descriptor but are not
		// required to match ours: detecting that is their purpose.
		pending := c.mesh.Post(from, key, in[:], nil)
		if err := c.mesh.Send(ctx, to, key, &conn.desc, out[:]); err != nil {
			done, stop := context.WithCancel(ctx)
			stop()
			pending.Wait(done) // withdraw the receive
			return &peerOpError{peer: to, send: true, err: err}
		}
		if _, err := pending.Wait(ctx); err != nil {
			return &peerOpError{peer: from, err: err}
		}
		var l, h vote
		l.get(in[:])
		h.get(in[voteLen:])
		if bytes.Compare(l.desc[:], lo.desc[:]) < 0 {
			lo = l
		}
		if bytes.Compare(h.desc[:], hi.desc[:]) > 0 {
			hi = h
		}
	}
	if lo.desc == hi.desc {
		return nil
	}
	return &mismatchError{msg: fmt.Sprintf("ranks disagree on the operation: rank %d called %s but rank %d called %s",
		lo.rank, decodeDesc(lo.desc), hi.rank, decodeDesc(hi.desc))}
}
