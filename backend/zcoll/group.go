package zcoll

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// group runs goroutines that share a cancellable context. The first error
// cancels the context so the others stop promptly, and Wait returns it only
// after every goroutine has exited: the engine relies on no goroutine still
// touching In/Out once an operation returns. A panic in a goroutine becomes
// its error.
type group = workgroup.Group

// spawner starts a goroutine in a group (or in one exchange of it).
type spawner = workgroup.Spawner

func newGroup(ctx context.Context) (*group, context.Context) {
	return workgroup.New(ctx, "zcoll")
}

// newIndependentGroup is a group of independent exchanges: an error that
// concerns one exchange only (it has a method PairLocal() returning true,
// like the transport's message mismatch or a corrupt frame) is kept but the
// other exchanges run on, so that one bad exchange does not leave unrelated
// peers waiting for messages that would never come. Any other error cancels
// the rest as usual. Goroutines of one exchange are started through
// newExchange, so that a failure stops that exchange's pipeline as a whole.
func newIndependentGroup(ctx context.Context) (*group, context.Context) {
	return workgroup.NewIndependent(ctx, "zcoll")
}

// exchange is one independent exchange (one direction with one peer) of an
// independent group: the first error of any of its goroutines cancels the
// exchange's context (stopping its pipeline, whose stages would otherwise
// wait for each other forever) and goes to the group; the errors its other
// goroutines then report are consequences and are dropped.
type exchange struct {
	g      *group
	cancel context.CancelFunc
	failed atomic.Bool
}

func newExchange(g *group, ctx context.Context) (*exchange, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &exchange{g: g, cancel: cancel}, ctx
}

func (x *exchange) Go(f func() error) {
	x.g.Go(func() error {
		err := f()
		if err != nil && x.failed.Swap(true) {
			return nil // a consequence of the first failure
		}
		if err != nil {
			x.cancel()
		}
		return err
	})
}

// done releases the exchange's context once the group has finished.
func (x *exchange) done() { x.cancel() }

// msg is a buffer travelling between an operation's goroutines. scratch
// marks pool buffers, to be returned once their last use is done.
type msg struct {
	buf     []byte
	scratch bool
	// coded: a received message left coded, for a device fold that
	// decodes it in the same pass (its buffers are the coder's Msg ones)
	coded *FoldSource
}

// window keeps several receives of a sequence posted at once and hands the
// results over in sequence order (see workgroup.RecvAhead), bounding the
// run-ahead (and the scratch in use) to twice its width.
type window = workgroup.Window[msg]

// gate tracks how many segments of a block have been released (for
// example, sent), so that another goroutine may wait before overwriting
// segment k.
type gate struct {
	mu sync.Mutex
	n  int
	ch chan struct{}
}

func newGates(n int) []*gate {
	gs := make([]*gate, n)
	for i := range gs {
		gs[i] = &gate{ch: make(chan struct{})}
	}
	return gs
}

// advance releases the next segment.
func (g *gate) advance() {
	g.mu.Lock()
	g.n++
	close(g.ch)
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

// open releases every segment.
func (g *gate) open() {
	g.mu.Lock()
	g.n = int(^uint(0) >> 1)
	close(g.ch)
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

// wait blocks until segment k is released.
func (g *gate) wait(ctx context.Context, k int) error {
	for {
		g.mu.Lock()
		if g.n > k {
			g.mu.Unlock()
			return nil
		}
		ch := g.ch
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
