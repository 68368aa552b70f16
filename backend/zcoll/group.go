package zcoll

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// group runs goroutines that share a cancellable context. The first error
// cancels the context so the others stop promptly, and Wait returns it only
// after every goroutine has exited: the engine relies on no goroutine still
// touching In/Out once an operation returns. (A copy of collective's.)
type group struct {
	wg          sync.WaitGroup
	cancel      context.CancelFunc
	once        sync.Once
	err         error
	independent bool
}

// spawner starts a goroutine in a group (or in one exchange of it).
type spawner interface {
	Go(f func() error)
}

func newGroup(ctx context.Context) (*group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &group{cancel: cancel}, ctx
}

// newIndependentGroup is a group of independent exchanges: an error that
// concerns one exchange only (it has a method PairLocal() returning true,
// like the transport's message mismatch or a corrupt frame) is kept but the
// other exchanges run on, so that one bad exchange does not leave unrelated
// peers waiting for messages that would never come. Any other error cancels
// the rest as usual. Goroutines of one exchange are started through
// exchange(), so that a failure stops that exchange's pipeline as a whole.
func newIndependentGroup(ctx context.Context) (*group, context.Context) {
	g, ctx := newGroup(ctx)
	g.independent = true
	return g, ctx
}

// Go runs f in a new goroutine. A panic in f (a bug) is turned into an
// error, since nobody else could recover it.
func (g *group) Go(f func() error) {
	g.wg.Go(func() {
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("zcoll: panic: %v\n%s", p, debug.Stack())
				}
			}()
			err = f()
		}()
		if err != nil {
			g.once.Do(func() {
				g.err = err
				if !g.independent || !pairLocal(err) {
					g.cancel()
				}
			})
		}
	})
}

// Wait waits for every goroutine and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
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

func (g *group) exchange(ctx context.Context) (*exchange, context.Context) {
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

// msg is a buffer travelling between an operation's goroutines. scratch
// marks pool buffers, to be returned once their last use is done.
type msg struct {
	buf     []byte
	scratch bool
}

// window keeps several receives of a sequence posted at once and hands the
// results over in sequence order: w goroutines each own every w-th message
// (a single receiving goroutine would re-post too late whenever the next
// message is already behind the one it just finished, costing the transport
// a buffered copy). Each holds at most one finished message and one in
// progress, bounding the run-ahead (and the scratch in use) to 2w.
type window struct {
	chans []chan msg
}

// recvAhead starts w goroutines for messages 0..count-1; recv(i) produces
// message i, collected with next(ctx, i) strictly in order.
func recvAhead(sp spawner, ctx context.Context, w, count int, recv func(i int) (msg, error)) *window {
	w = max(1, min(w, count))
	win := &window{chans: make([]chan msg, w)}
	for j := range win.chans {
		ch := make(chan msg, 1)
		win.chans[j] = ch
		sp.Go(func() error {
			for i := j; i < count; i += w {
				m, err := recv(i)
				if err != nil {
					return err
				}
				if err := put(ctx, ch, m); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return win
}

// next returns message i, which must be the one after the last collected.
func (w *window) next(ctx context.Context, i int) (msg, error) {
	return take(ctx, w.chans[i%len(w.chans)])
}

// spread runs f(0..count-1) on w goroutines, each owning every w-th index,
// for work nobody waits on in order.
func spread(sp spawner, w, count int, f func(i int) error) {
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

// released reports whether segment k is released.
func (g *gate) released(k int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n > k
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
