// Package transport moves framed messages between the ranks of a group over
// TCP: one listener per process, one authenticated connection per pair of
// ranks in a group made lazily on first use, and a mailbox that matches
// incoming messages to posted receives.
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
)

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
//	0  kind u8, 3 bytes zero
//	4  slot u32
//	8  seq u64 (collective sequence number, or the p2p tag)
//	16 length u64 (payload bytes that follow)
//	24 desc [32]byte
//	56 magic u32 "ZCF1", 4 bytes zero
type header struct {
	kind   Kind
	slot   uint32
	seq    uint64
	length uint64
	desc   Desc
}

func (h *header) encode(b []byte) {
	_ = b[headerLen-1]
	clear(b[:headerLen])
	b[0] = byte(h.kind)
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
	h.slot = binary.LittleEndian.Uint32(b[4:])
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.length = binary.LittleEndian.Uint64(b[16:])
	copy(h.desc[:], b[24:56])
	switch h.kind {
	case Coll, P2P, frameAbort, frameBye:
	default:
		return fmt.Errorf("%w: kind %d", errBadFrame, h.kind)
	}
	if h.length > maxFrameLen || (h.kind == frameAbort && h.length > maxAbortLen) {
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
