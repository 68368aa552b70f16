package collective

import (
	"context"
	"fmt"
)

// Error reports which part of a collective failed. Err is the cause (often
// the Conn's error, or the context's when the operation was cancelled
// because another part failed first).
type Error struct {
	Op      string // the collective, e.g. "allreduce"
	Algo    string // the algorithm, e.g. "ring"
	Action  string // "send" or "recv"
	Peer    int    // the other rank
	Step    int    // algorithm step (the Slot's step)
	Segment int    // segment within the step (the Slot's segment)
	Err     error
}

// Error formats the failure as "collective: OP (ALGO): ACTION rank P, step S segment K: cause".
func (e *Error) Error() string {
	dir := "to"
	if e.Action == "recv" {
		dir = "from"
	}
	return fmt.Sprintf("collective: %s (%s): %s %s rank %d, step %d segment %d: %v",
		e.Op, e.Algo, e.Action, dir, e.Peer, e.Step, e.Segment, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// step names a (collective, algorithm) pair for error reports and performs
// the point-to-point calls of that algorithm, wrapping their errors.
type step struct {
	op, algo string
	c        Conn
}

func (s step) send(ctx context.Context, peer, st, seg int, bufs ...[]byte) error {
	if err := s.c.Send(ctx, peer, Slot(st, seg), bufs...); err != nil {
		return &Error{Op: s.op, Algo: s.algo, Action: "send", Peer: peer, Step: st, Segment: seg, Err: err}
	}
	return nil
}

func (s step) recv(ctx context.Context, peer, st, seg int, buf []byte) error {
	if err := s.c.Recv(ctx, peer, Slot(st, seg), buf); err != nil {
		return &Error{Op: s.op, Algo: s.algo, Action: "recv", Peer: peer, Step: st, Segment: seg, Err: err}
	}
	return nil
}
