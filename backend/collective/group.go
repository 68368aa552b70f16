package collective

import (
	"context"

	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// group runs goroutines that share a cancellable context. The first error
// cancels the context so the others stop promptly, and Wait returns it only
// after every goroutine has exited: the engine relies on no goroutine still
// touching In/Out once a collective returns. A panic in a goroutine becomes
// its error.
type group = workgroup.Group

func newGroup(ctx context.Context) (*group, context.Context) {
	return workgroup.New(ctx, "collective")
}

// newIndependentGroup is a group whose goroutines do not depend on each
// other: an error that concerns one exchange only (it has a method
// PairLocal() returning true, like the transport's message mismatch) is
// kept but the others run on, so that one bad exchange does not leave
// unrelated peers waiting for messages that would never come. Any other
// error cancels the rest as usual.
func newIndependentGroup(ctx context.Context) (*group, context.Context) {
	return workgroup.NewIndependent(ctx, "collective")
}

// window keeps several receives of a sequence posted at once and hands the
// results over in sequence order (see workgroup.RecvAhead): the engine
// writes a message straight into the buffer of a posted receive, but
// buffers it (an allocation and an extra copy) when it arrives first.
type window = workgroup.Window[msg]
