// Package collective holds the collective algorithms (ring, direct, chain,
// dissemination), written against a minimal point-to-point interface so they
// stay independent of the transport that carries the bytes.
package collective

import "context"

// Conn is one rank's view of a single collective operation: it sends and
// receives whole messages to and from the other ranks of the group. Messages
// are matched by (peer, slot) within the operation; a slot is chosen by the
// algorithm (typically step<<16 | segment) and must be used at most once per
// direction and peer in an operation.
//
// Implementations validate that the incoming message belongs to the same
// operation (sequence number and op descriptor) and that its length equals
// len(buf); a mismatch is returned as an error.
type Conn interface {
	// Rank is this rank's index in the group, Size the group size.
	Rank() int
	Size() int
	// Send writes the concatenation of bufs as one message to peer. It
	// returns once the bytes are handed to the transport, after which the
	// caller may reuse bufs.
	Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error
	// Recv blocks until the message (peer, slot) has been written into buf.
	Recv(ctx context.Context, peer int, slot uint32, buf []byte) error
}

// Slot packs an algorithm step and a segment index into a message slot.
// Slots with the top bit set are reserved for the engine's own messages.
func Slot(step, segment int) uint32 {
	return uint32(step)<<16 | uint32(segment)&0xffff
}

// VarConn is a Conn that can also receive a message whose length is only
// bounded, such as a compressed payload.
type VarConn interface {
	Conn
	// RecvUpTo receives a message of at most len(buf) bytes into buf and
	// returns its length.
	RecvUpTo(ctx context.Context, peer int, slot uint32, buf []byte) (int, error)
}
