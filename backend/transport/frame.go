// Package transport moves framed messages between the ranks of a group over
// TCP: one listener per process, one authenticated connection per pair of
// ranks in a group made lazily on first use, and a mailbox that matches
// incoming messages to posted receives. Between processes of one host and
// network namespace, large messages are read from the sender's memory
// instead (cma.go).
package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says which space a message key belongs to.
type Kind uint8

// Message kinds on the wire.
const (
	// Coll messages belong to a collective op: key (seq, slot).
	Coll Kind = 1
	// P2P messages are send/recv: key (tag), matched in order.
	P2P Kind = 2
	// frameAbort carries a text reason; the group is unusable after it.
	frameAbort Kind = 3
	// frameBye says the sender closed its communicator cleanly.
	frameBye Kind = 4
	// frameCMAHello offers the sender's memory to be read (cma.go).
	frameCMAHello Kind = 5
	// frameCMAReply answers a hello: seq 1 if the replier can read the
	// sender's memory, 0 if not.
	frameCMAReply Kind = 6
	// frameAck answers a message sent by descriptor with token seq: slot
	// ackRead (read or dropped: its memory may be reused) or ackResend.
	frameAck Kind = 7
)

// Answers in a frameAck's slot.
const (
	ackRead uint32 = 0
	// ackResend: the receiver could not read the sender's memory; the
	// sender writes the message again, on the socket.
	ackResend uint32 = 1
)

// flagCMA marks a data frame whose payload is not on the socket: a
// descriptor follows the header instead, and the receiver reads the
// payload from the sender's memory.
const flagCMA = 1

// DescLen is the size of the op descriptor every data frame carries.
const DescLen = 32

// Desc describes the operation a message belongs to (op, dtype, count, ...).
// The transport treats it as opaque bytes and only compares it.
type Desc [DescLen]byte

const (
	headerLen   = 64
	frameMagic  = 0x5a434631 // "ZCF1"
	maxAbortLen = 64 << 10
	// maxFrameLen bounds what a peer may announce, so a corrupted header
	// cannot make us allocate without limit.
	maxFrameLen = 1 << 40
)

// header is the fixed 64-byte frame header:
//
//	0  kind u8, flags u8, 2 bytes zero
//	4  slot u32
//	8  seq u64 (collective sequence number, or the p2p tag)
//	16 length u64 (payload bytes that follow)
//	24 desc [32]byte
//	56 magic u32 "ZCF1", 4 bytes zero
type header struct {
	kind   Kind
	flags  uint8
	slot   uint32
	seq    uint64
	length uint64
	desc   Desc
}

func (h *header) encode(b []byte) {
	_ = b[headerLen-1]
	clear(b[:headerLen])
	b[0] = byte(h.kind)
	b[1] = h.flags
	binary.LittleEndian.PutUint32(b[4:], h.slot)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.length)
	copy(b[24:56], h.desc[:])
	binary.LittleEndian.PutUint32(b[56:], frameMagic)
}

var errBadFrame = errors.New("zipccl: malformed frame header (protocol error)")

func (h *header) decode(b []byte) error {
	_ = b[headerLen-1]
	if binary.LittleEndian.Uint32(b[56:]) != frameMagic {
		return errBadFrame
	}
	h.kind = Kind(b[0])
	h.flags = b[1]
	h.slot = binary.LittleEndian.Uint32(b[4:])
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.length = binary.LittleEndian.Uint64(b[16:])
	copy(h.desc[:], b[24:56])
	switch h.kind {
	case Coll, P2P, frameAbort, frameBye, frameCMAHello, frameCMAReply, frameAck:
	default:
		return fmt.Errorf("%w: kind %d", errBadFrame, h.kind)
	}
	if h.flags&^flagCMA != 0 || (h.flags != 0 && h.kind != Coll && h.kind != P2P) {
		return fmt.Errorf("%w: flags %#x on kind %d", errBadFrame, h.flags, h.kind)
	}
	if h.length > maxFrameLen || (h.kind == frameAbort && h.length > maxAbortLen) ||
		(h.kind == frameCMAHello && h.length != cmaHelloLen) || ((h.kind == frameCMAReply || h.kind == frameAck) && h.length != 0) {
		return fmt.Errorf("%w: length %d", errBadFrame, h.length)
	}
	return nil
}

// Key identifies a message within a mesh and peer.
type Key struct {
	Kind Kind
	Seq  uint64
	Slot uint32
}
