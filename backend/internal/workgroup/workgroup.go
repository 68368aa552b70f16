// Package workgroup holds the goroutine plumbing shared by the collective
// algorithms (package collective) and the compressed ones (package zcoll):
// an error group that waits for every goroutine, a variant whose exchanges
// fail independently, and the receive windows that keep several receives
// of a sequence posted at once.
package workgroup

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// Spawner starts a goroutine in a group (or in some part of one).
type Spawner interface {
	Go(f func() error)
}

// Group runs goroutines that share a cancellable context. The first error
// cancels the context so the others stop promptly, and Wait returns it only
// after every goroutine has exited: the engine relies on no goroutine still
// touching In/Out once an operation returns.
type Group struct {
	wg          sync.WaitGroup
	cancel      context.CancelFunc
	once        sync.Once
	err         error
	independent bool
	name        string
}

// New returns a group and its context, derived from ctx. name prefixes the
// errors made of panics (e.g. "collective").
func New(ctx context.Context, name string) (*Group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &Group{cancel: cancel, name: name}, ctx
}

// NewIndependent is New for a group whose goroutines do not depend on each
// other: an error that concerns one exchange only (see PairLocal) is kept
// but the others run on, so that one bad exchange does not leave unrelated
// peers waiting for messages that would never come. Any other error cancels
// the rest as usual.
func NewIndependent(ctx context.Context, name string) (*Group, context.Context) {
	g, ctx := New(ctx, name)
	g.independent = true
	return g, ctx
}

// Go runs f in a new goroutine. A panic in f (a bug, e.g. a reduction
// kernel rejecting its operands) is turned into an error, since nobody else
// could recover it and it would take the whole process down.
func (g *Group) Go(f func() error) {
	g.wg.Go(func() {
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%s: panic: %v\n%s", g.name, p, debug.Stack())
				}
			}()
			err = f()
		}()
		if err != nil {
			g.once.Do(func() {
				g.err = err
				if !g.independent || !PairLocal(err) {
					g.cancel()
				}
			})
		}
	})
}

// Wait waits for every goroutine and returns the first error.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

// PairLocal reports whether err concerns one exchange only: it (or an error
// it wraps) has a method PairLocal() returning true, like the transport's
// message mismatch or a corrupt frame.
func PairLocal(err error) bool {
	var pl interface{ PairLocal() bool }
	return errors.As(err, &pl) && pl.PairLocal()
}

// Put sends v on ch unless ctx is cancelled first.
func Put[T any](ctx context.Context, ch chan<- T, v T) error {
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Take receives from ch unless ctx is cancelled first.
func Take[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// Window keeps several receives of a sequence posted at once and hands the
// results over in sequence order. The engine writes a message straight into
// the buffer of a posted receive, but buffers it (an allocation and an extra
// copy) when it arrives first; a single receiving goroutine re-posts too late
// whenever the next message is already behind the one it just finished, so
// w goroutines each own every w-th message of the sequence.
type Window[T any] struct {
	chans []chan T
}

// RecvAhead starts w receivers in sp for the messages 0..count-1 of a
// sequence. recv(i) receives message i (choosing its buffer); message i is
// then collected with Next(ctx, i), strictly in order. Each receiver holds
// at most one finished message and one posted receive, bounding the
// run-ahead (and the scratch in use) to 2w messages.
func RecvAhead[T any](sp Spawner, ctx context.Context, w, count int, recv func(i int) (T, error)) *Window[T] {
	w = max(1, min(w, count))
	win := &Window[T]{chans: make([]chan T, w)}
	for j := range win.chans {
		ch := make(chan T, 1)
		win.chans[j] = ch
		sp.Go(func() error {
			for i := j; i < count; i += w {
				m, err := recv(i)
				if err != nil {
					return err
				}
				if err := Put(ctx, ch, m); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return win
}

// Ordered returns a window of width 1 whose messages the caller feeds into
// ch itself, in sequence order.
func Ordered[T any](ch chan T) *Window[T] {
	return &Window[T]{chans: []chan T{ch}}
}

// Next returns message i, which must be the one after the last collected.
func (w *Window[T]) Next(ctx context.Context, i int) (T, error) {
	return Take(ctx, w.chans[i%len(w.chans)])
}

// Spread runs f(0..count-1) on w goroutines started in sp, each owning every
// w-th index, for work nobody waits on in order (e.g. receives that land in
// their final place).
func Spread(sp Spawner, w, count int, f func(i int) error) {
	w = max(1, min(w, count))
	for j := range w {
		sp.Go(func() error {
			for i := j; i < count; i += w {
				if err := f(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
}
