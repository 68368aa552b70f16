package transport

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by operations on a mesh that was closed locally.
var ErrClosed = errors.New("zipccl: communicator closed")

// PeerError says the connection to a peer cannot be used.
type PeerError struct {
	Rank int
	// Remote is true when the peer went away (reset, EOF, shutdown),
	// false when this side tore the connection down (e.g. cancellation).
	Remote bool
	Err    error
}

func (e *PeerError) Error() string {
	if e.Remote {
		return fmt.Sprintf("lost connection to rank %d: %v", e.Rank, e.Err)
	}
	return fmt.Sprintf("connection to rank %d closed: %v", e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// MismatchError says a message arrived that is not the one the receiver
// expected: another op, dtype or count (descriptor), or another length.
type MismatchError struct {
	Peer            int
	Key             Key
	Want, Got       Desc
	WantLen, GotLen uint64
}

func (e *MismatchError) Error() string {
	if e.Want != e.Got {
		return fmt.Sprintf("message from rank %d belongs to a different operation", e.Peer)
	}
	return fmt.Sprintf("message from rank %d has %d bytes, expected %d", e.Peer, e.GotLen, e.WantLen)
}

// PairLocal says the error concerns this one message exchange only: the
// connection and the other exchanges of the op are unaffected.
func (e *MismatchError) PairLocal() bool { return true }
