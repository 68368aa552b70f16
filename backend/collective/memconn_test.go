package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// memWorld is an in-memory transport shared by the ranks of one operation.
// It behaves like the engine's Conn: sends are eager (buffered until the
// matching Recv is posted), each (src, dst, slot) carries at most one
// message, Recv checks the length, and Recv/Send return promptly when ctx
// is cancelled or the world is aborted (the engine's connections failing).
type memWorld struct {
	n     int
	mu    sync.Mutex
	boxes map[boxKey]*box
	done  map[boxKey]bool // received messages, to catch reused slots
	dead  []chan struct{} // per rank, closed by abort
	cause error

	// fail, when set, is consulted before every Send and Recv; a non-nil
	// error is returned from that call and aborts every other rank, as a
	// broken TCP connection would. The failing rank itself is left alone so
	// its first error is deterministically the injected one.
	fail func(src, dst int, slot uint32, send bool) error
	// jitter, when > 0, sleeps up to that long before operations to shuffle
	// arrival order (per-rank RNG so it is race-free).
	jitter time.Duration

	// pool recycles message buffers so benchmarks measure the algorithms,
	// not the allocator.
	pool *Pool
}

type boxKey struct {
	src, dst int
	slot     uint32
}

type box struct {
	msg   []byte
	full  chan struct{} // closed once msg is set
	sent  bool
	taken bool
}

func newMemWorld(n int) *memWorld {
	w := &memWorld{n: n, boxes: map[boxKey]*box{}, done: map[boxKey]bool{}, dead: make([]chan struct{}, n), pool: NewPool()}
	for i := range w.dead {
		w.dead[i] = make(chan struct{})
	}
	return w
}

func (w *memWorld) abort(err error, except int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil {
		w.cause = err
		for i, ch := range w.dead {
			if i != except {
				close(ch)
			}
		}
	}
}

func (w *memWorld) box(k boxKey) *box {
	b := w.boxes[k]
	if b == nil {
		b = &box{full: make(chan struct{})}
		w.boxes[k] = b
	}
	return b
}

// conns returns one Conn per rank.
func (w *memWorld) conns() []*memConn {
	cs := make([]*memConn, w.n)
	for i := range cs {
		cs[i] = &memConn{w: w, rank: i, rng: rand.New(rand.NewPCG(uint64(i), 7))}
	}
	return cs
}

type memConn struct {
	w    *memWorld
	rank int
	rmu  sync.Mutex
	rng  *rand.Rand
}

func (c *memConn) Rank() int { return c.rank }
func (c *memConn) Size() int { return c.w.n }

func (c *memConn) pause() {
	if c.w.jitter <= 0 {
		return
	}
	c.rmu.Lock()
	d := time.Duration(c.rng.Int64N(int64(c.w.jitter)))
	c.rmu.Unlock()
	time.Sleep(d)
}

func (c *memConn) check(peer int, slot uint32, send bool) error {
	if peer < 0 || peer >= c.w.n || peer == c.rank {
		return fmt.Errorf("memconn: rank %d: bad peer %d", c.rank, peer)
	}
	if slot&0x80000000 != 0 {
		return fmt.Errorf("memconn: rank %d: reserved slot %#x", c.rank, slot)
	}
	if c.w.fail != nil {
		if err := c.w.fail(c.rank, peer, slot, send); err != nil {
			c.w.abort(err, c.rank)
			return err
		}
	}
	return nil
}

var errAborted = errors.New("memconn: world aborted")

func (c *memConn) aborted() error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return fmt.Errorf("%w: %v", errAborted, c.w.cause)
}

func (c *memConn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	c.pause()
	if err := c.check(peer, slot, true); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.w.dead[c.rank]:
		return c.aborted()
	default:
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	msg := c.w.pool.Get(n)[:0]
	for _, b := range bufs {
		msg = append(msg, b...)
	}
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	k := boxKey{c.rank, peer, slot}
	b := w.box(k)
	if b.sent || w.done[k] {
		return fmt.Errorf("memconn: duplicate send %d->%d slot %#x", c.rank, peer, slot)
	}
	b.sent, b.msg = true, msg
	close(b.full)
	return nil
}

func (c *memConn) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	c.pause()
	if err := c.check(peer, slot, false); err != nil {
		return err
	}
	w := c.w
	k := boxKey{peer, c.rank, slot}
	w.mu.Lock()
	b := w.box(k)
	if b.taken || w.done[k] {
		w.mu.Unlock()
		return fmt.Errorf("memconn: duplicate recv %d->%d slot %#x", peer, c.rank, slot)
	}
	b.taken = true
	w.mu.Unlock()
	select {
	case <-b.full:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-w.dead[c.rank]:
		return c.aborted()
	}
	w.mu.Lock()
	msg := b.msg
	delete(w.boxes, k)
	w.done[k] = true
	w.mu.Unlock()
	if len(msg) != len(buf) {
		return fmt.Errorf("memconn: %d->%d slot %#x: message has %d bytes, receive buffer %d", peer, c.rank, slot, len(msg), len(buf))
	}
	copy(buf, msg)
	w.pool.Put(msg)
	return nil
}

// leftovers reports messages sent but never received, or receives posted
// for messages never sent: both mean the ranks disagreed on the algorithm.
func (w *memWorld) leftovers() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, b := range w.boxes {
		return fmt.Errorf("memconn: unmatched message %d->%d slot %#x (sent %v, received %v) and %d more", k.src, k.dst, k.slot, b.sent, b.taken, len(w.boxes)-1)
	}
	return nil
}
