package comm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/zipccl/zipccl/backend/transport"
)

// The agreement check makes every rank learn whether all ranks called the
// same op, so a mismatch fails the op on every rank with a message naming
// both sides, never a hang. It folds (smallest descriptor, its rank,
// largest descriptor, its rank) over the group; the smallest equals the
// largest exactly when all agree. It runs alongside the data movement, so
// it costs latency only on ops too small to hide it. Barrier is this check
// alone. The same exchange carries each rank's compression-ratio estimates
// for the op's data, folded to the group's minimum, which the switcher uses
// for later ops, the time each rank spent in the previous collective,
// which the switcher's feedback uses, and the op's largest payload.

// Reserved slots (the top bit is the engine's).
const (
	checkSlot  = 0x80000000
	probeSlot  = 0x81000000
	statusSlot = 0x82000000
)

// fold runs a dissemination all-reduce of a fixed-size record: in round r
// each rank sends its record to rank+2^r and merges the one from rank-2^r
// into its own. merge must be idempotent, commutative and associative (like
// min and max), so the overlapping coverage of a group whose size is not a
// power of two does not matter; after ceil(log2 N) rounds every rank holds
// the fold over all ranks, bit for bit the same.
func (c *Comm) fold(ctx context.Context, seq uint64, slot uint32, desc *transport.Desc, rec []byte, merge func(mine, theirs []byte)) error {
	n, me := c.cfg.Size, c.cfg.Rank
	out := make([]byte, len(rec))
	in := make([]byte, len(rec))
	for r, dist := 0, 1; dist < n; r, dist = r+1, dist*2 {
		copy(out, rec)
		to, from := (me+dist)%n, (me-dist+n)%n
		key := transport.Key{Kind: transport.Coll, Seq: seq, Slot: slot | uint32(r)}
		// The records carry the sender's descriptor but are not required
		// to match ours: finding out is the check's purpose.
		pending := c.mesh.Post(from, key, in, nil)
		if err := c.mesh.Send(ctx, to, key, desc, out); err != nil {
			done, stop := context.WithCancel(ctx)
			stop()
			pending.Wait(done) // withdraw the receive
			return &peerOpError{peer: to, send: true, err: err}
		}
		if _, err := pending.Wait(ctx); err != nil {
			return &peerOpError{peer: from, err: err}
		}
		merge(rec, in)
	}
	return nil
}

// The check's record: two votes, then the telemetry.
const (
	voteLen   = transport.DescLen + 4
	teleLen   = 40
	recordLen = 2*voteLen + teleLen
)

// telemetry is what each rank reports with every check.
type telemetry struct {
	// Estimated compression ratios of this op's data with zip3 and huff;
	// 0 when not estimated. Folded to the minimum over the ranks that
	// estimated.
	zip3, huff float64
	// prev: the seconds this rank spent in the previous collective (see
	// lastCall; 0 if it is not timed, +Inf if it failed), folded by
	// foldPrev.
	prev float64
	// size: this op's payload on this rank (what the switcher counts),
	// folded to the maximum; only an all_to_all's differs between ranks.
	size float64
	// where: whether this rank's ring links stay in its network
	// namespace, folded to the maximum: 0 not asked (the group knows
	// already), 1 local, 2 unknown (a link not connected yet), 3 remote.
	where float64
}

// Values of telemetry.where, ordered so that the maximum is the group's:
// one remote link makes the group remote, one unknown one leaves it
// unknown.
const (
	whereLocal   = 1
	whereUnknown = 2
	whereRemote  = 3
)

func putTelemetry(b []byte, t telemetry) {
	binary.LittleEndian.PutUint64(b, math.Float64bits(t.zip3))
	binary.LittleEndian.PutUint64(b[8:], math.Float64bits(t.huff))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(t.prev))
	binary.LittleEndian.PutUint64(b[24:], math.Float64bits(t.size))
	binary.LittleEndian.PutUint64(b[32:], math.Float64bits(t.where))
}

func getTelemetry(b []byte) telemetry {
	return telemetry{
		zip3:  math.Float64frombits(binary.LittleEndian.Uint64(b)),
		huff:  math.Float64frombits(binary.LittleEndian.Uint64(b[8:])),
		prev:  math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
		size:  math.Float64frombits(binary.LittleEndian.Uint64(b[24:])),
		where: math.Float64frombits(binary.LittleEndian.Uint64(b[32:])),
	}
}

// minKnown folds two estimates, 0 meaning unknown.
func minKnown(a, b float64) float64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// foldPrev folds two ranks' times of the previous collective to the
// shortest, +Inf (a failure) winning. A rank's time runs from when it
// entered the call, so all but the last rank to arrive also count their
// wait for it: the shortest is the call's own duration, free of the skew
// between ranks (which has nothing to do with how the call ran).
func foldPrev(a, b float64) float64 {
	if math.IsInf(a, 1) || math.IsInf(b, 1) {
		return math.Inf(1)
	}
	return min(a, b)
}

func mergeRecord(mine, theirs []byte) {
	if bytes.Compare(theirs[:transport.DescLen], mine[:transport.DescLen]) < 0 {
		copy(mine[:voteLen], theirs[:voteLen])
	}
	if bytes.Compare(theirs[voteLen:voteLen+transport.DescLen], mine[voteLen:voteLen+transport.DescLen]) > 0 {
		copy(mine[voteLen:2*voteLen], theirs[voteLen:2*voteLen])
	}
	a, b := getTelemetry(mine[2*voteLen:]), getTelemetry(theirs[2*voteLen:])
	putTelemetry(mine[2*voteLen:], telemetry{zip3: minKnown(a.zip3, b.zip3), huff: minKnown(a.huff, b.huff), prev: foldPrev(a.prev, b.prev), size: max(a.size, b.size), where: max(a.where, b.where)})
}

// agree runs the check for one op and returns the group's telemetry.
func (c *Comm) agree(ctx context.Context, conn *opConn, tele telemetry) (telemetry, error) {
	rec := make([]byte, recordLen)
	for _, off := range []int{0, voteLen} {
		copy(rec[off:], conn.desc[:])
		binary.LittleEndian.PutUint32(rec[off+transport.DescLen:], uint32(c.cfg.Rank))
	}
	putTelemetry(rec[2*voteLen:], tele)
	if err := c.fold(ctx, conn.seq, checkSlot, &conn.desc, rec, mergeRecord); err != nil {
		return telemetry{}, err
	}
	lo, hi := rec[:voteLen], rec[voteLen:2*voteLen]
	if bytes.Equal(lo[:transport.DescLen], hi[:transport.DescLen]) {
		return getTelemetry(rec[2*voteLen:]), nil
	}
	var dlo, dhi transport.Desc
	copy(dlo[:], lo)
	copy(dhi[:], hi)
	return telemetry{}, &mismatchError{msg: fmt.Sprintf("ranks disagree on the operation: rank %d called %s but rank %d called %s",
		binary.LittleEndian.Uint32(lo[transport.DescLen:]), decodeDesc(dlo),
		binary.LittleEndian.Uint32(hi[transport.DescLen:]), decodeDesc(dhi))}
}

// A block's size in an all_to_all is known only to its sender and its
// receiver, so a split mismatch fails the receiver alone. After every
// all_to_all the group therefore folds each rank's outcome (a failed rank's
// error text, the lowest failed rank winning) so that every rank fails
// with the receiver's message. It costs ceil(log2 N) tiny rounds.
const statusTextLen = 240

func putStatus(rec []byte, rank int, text string) {
	rec[0] = 1
	binary.LittleEndian.PutUint32(rec[1:], uint32(rank))
	copy(rec[5:], text)
}

func mergeStatus(mine, theirs []byte) {
	if theirs[0] == 0 {
		return
	}
	if mine[0] == 0 || binary.LittleEndian.Uint32(theirs[1:]) < binary.LittleEndian.Uint32(mine[1:]) {
		copy(mine, theirs)
	}
}

// splitStatus shares dataErr (this rank's all_to_all outcome) over the
// group and returns the error this rank reports: its own, or the lowest
// failed rank's.
func (c *Comm) splitStatus(ctx context.Context, conn *opConn, fields descFields, dataErr error) error {
	rec := make([]byte, 5+statusTextLen)
	if dataErr != nil {
		text := dataErr.Error()
		var tme *transport.MismatchError
		if errors.As(dataErr, &tme) {
			text = c.describeMismatch(fields, tme)
		}
		putStatus(rec, c.cfg.Rank, text)
	}
	if err := c.fold(ctx, conn.seq, statusSlot, &conn.desc, rec, mergeStatus); err != nil {
		if dataErr != nil {
			return dataErr
		}
		return err
	}
	if dataErr != nil || rec[0] == 0 {
		return dataErr
	}
	text := string(bytes.TrimRight(rec[5:], "\x00"))
	return &mismatchError{msg: fmt.Sprintf("rank %d failed it: %s", binary.LittleEndian.Uint32(rec[1:]), text)}
}
