package collective

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// group runs goroutines that share a cancellable context. The first error
// cancels the context so the others stop promptly, and Wait returns it only
// after every goroutine has exited: the engine relies on no goroutine still
// touching In/Out once a collective returns.
type group struct {
	wg        sync.WaitGroup
	cancel    context.CancelFunc
	once      sync.Once
	err       error
	keepGoing bool
}

func newGroup(ctx context.Context) (*group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &group{cancel: cancel}, ctx
}

// newIndependentGroup is a group whose goroutines do not depend on each
// other: an error that concerns one exchange only (it has a method
// PairLocal() returning true, like the transport's message mismatch) is
// kept but the others run on, so that one bad exchange does not leave
// unrelated peers waiting for messages that would never come. Any other
// error cancels the rest as usual.
func newIndependentGroup(ctx context.Context) (*group, context.Context) {
	g, ctx := newGroup(ctx)
	g.keepGoing = true
	return g, ctx
}

// Go runs f in a new goroutine. A panic in f (a bug, e.g. a reduction
// kernel rejecting its operands) is turned into an error, since nobody else
// could recover it and it would take the whole process down.
func (g *group) Go(f func() error) {
	g.wg.Go(func() {
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("collective: panic: %v\n%s", p, debug.Stack())
				}
			}()
			err = f()
		}()
		if err != nil {
			g.once.Do(func() {
				g.err = err
				if !g.keepGoing || !pairLocal(err) {
					g.cancel()
				}
			})
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

// put sends v on ch unless ctx is cancelled first.
func put[T any](ctx context.Context, ch chan<- T, v T) error {
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// take receives from ch unless ctx is cancelled first.
func take[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

func pairLocal(err error) bool {
	var pl interface{ PairLocal() bool }
	return errors.As(err, &pl) && pl.PairLocal()
}
