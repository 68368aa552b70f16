// Package conntest provides point-to-point connections for testing and
// benchmarking collective algorithms written against collective.Conn and
// collective.VarConn: an in-memory World with fault, corruption, jitter and
// rendezvous hooks, and a loopback TCP mesh shaped like the engine's
// transport. It does not import package collective (so that collective's
// own tests can use it); its Conns satisfy collective.VarConn structurally.
package conntest

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// World is an in-memory transport shared by the ranks of one operation. It
// behaves like the engine's Conn: sends are eager (buffered until the
// matching receive is posted) unless Rendezvous is set, each (src, dst,
// slot) carries at most one message, Recv checks the length exactly and
// RecvUpTo bounds it, and calls return promptly when ctx is cancelled or
// the world is aborted (the engine's connections failing).
//
// Set the hooks before creating Conns; they must not change while an
// operation runs.
type World struct {
	n     int
	mu    sync.Mutex
	boxes map[boxKey]*box
	done  map[boxKey]bool // received messages, to catch reused slots
	dead  []chan struct{} // per rank, closed by abort
	cause error

	sent     []atomic.Int64 // payload bytes sent, per rank
	messages []atomic.Int64 // messages sent, per rank

	// Fail, when set, is consulted before every Send and Recv; a non-nil
	// error is returned from that call and aborts every other rank, as a
	// broken TCP connection would. The failing rank itself is left alone so
	// its first error is deterministically the injected one.
	Fail func(src, dst int, slot uint32, send bool) error
	// Corrupt, when set, may modify a message in flight (after the sender
	// handed it over, before the receiver sees it); it returns the message
	// to deliver (possibly resliced).
	Corrupt func(src, dst int, slot uint32, msg []byte) []byte
	// Jitter, when > 0, sleeps up to that long before operations to shuffle
	// arrival order (per-rank RNG so it is race-free).
	Jitter time.Duration
	// Rendezvous makes Send wait until the receiver has posted the matching
	// receive, as a transport without buffering would: an algorithm that
	// does not post its receives early enough deadlocks.
	Rendezvous bool

	pool bufPool
}

type boxKey struct {
	src, dst int
	slot     uint32
}

type box struct {
	msg    []byte
	full   chan struct{} // closed once msg is set
	posted chan struct{} // closed once a receive is posted
	sent   bool
	taken  bool
}

// NewWorld returns a world of n ranks.
func NewWorld(n int) *World {
	w := &World{n: n, boxes: map[boxKey]*box{}, done: map[boxKey]bool{}, dead: make([]chan struct{}, n),
		sent: make([]atomic.Int64, n), messages: make([]atomic.Int64, n)}
	for i := range w.dead {
		w.dead[i] = make(chan struct{})
	}
	return w
}

// Size is the number of ranks.
func (w *World) Size() int { return w.n }

// Abort fails every rank but except (-1: all of them) with err, as a broken
// connection would.
func (w *World) Abort(err error, except int) {
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

func (w *World) box(k boxKey) *box {
	b := w.boxes[k]
	if b == nil {
		b = &box{full: make(chan struct{}), posted: make(chan struct{})}
		w.boxes[k] = b
	}
	return b
}

// Conns returns one Conn per rank.
func (w *World) Conns() []*Conn {
	cs := make([]*Conn, w.n)
	for i := range cs {
		cs[i] = &Conn{w: w, rank: i, rng: rand.New(rand.NewPCG(uint64(i), 7))}
	}
	return cs
}

// SentBytes is the number of payload bytes rank has sent so far.
func (w *World) SentBytes(rank int) int64 { return w.sent[rank].Load() }

// TotalSent is the number of payload bytes all ranks have sent.
func (w *World) TotalSent() int64 {
	var t int64
	for i := range w.sent {
		t += w.sent[i].Load()
	}
	return t
}

// Messages is the number of messages all ranks have sent.
func (w *World) Messages() int64 {
	var t int64
	for i := range w.messages {
		t += w.messages[i].Load()
	}
	return t
}

// Leftovers reports messages sent but never received, or receives posted
// for messages never sent: both mean the ranks disagreed on the algorithm.
func (w *World) Leftovers() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, b := range w.boxes {
		return fmt.Errorf("conntest: unmatched message %d->%d slot %#x (sent %v, received %v) and %d more", k.src, k.dst, k.slot, b.sent, b.taken, len(w.boxes)-1)
	}
	return nil
}

// Conn is one rank's endpoint; it implements collective.VarConn.
type Conn struct {
	w    *World
	rank int
	rmu  sync.Mutex
	rng  *rand.Rand
}

// Rank is this endpoint's rank.
func (c *Conn) Rank() int { return c.rank }

// Size is the group size.
func (c *Conn) Size() int { return c.w.n }

func (c *Conn) pause() {
	if c.w.Jitter <= 0 {
		return
	}
	c.rmu.Lock()
	d := time.Duration(c.rng.Int64N(int64(c.w.Jitter)))
	c.rmu.Unlock()
	time.Sleep(d)
}

func (c *Conn) check(peer int, slot uint32, send bool) error {
	if peer < 0 || peer >= c.w.n || peer == c.rank {
		return fmt.Errorf("conntest: rank %d: bad peer %d", c.rank, peer)
	}
	if slot&0x80000000 != 0 {
		return fmt.Errorf("conntest: rank %d: reserved slot %#x", c.rank, slot)
	}
	if c.w.Fail != nil {
		if err := c.w.Fail(c.rank, peer, slot, send); err != nil {
			c.w.Abort(err, c.rank)
			return err
		}
	}
	return nil
}

// ErrAborted is wrapped by the errors of calls cut short by Abort.
var ErrAborted = errors.New("conntest: world aborted")

func (c *Conn) aborted() error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return fmt.Errorf("%w: %v", ErrAborted, c.w.cause)
}

// Send delivers the concatenation of bufs as message (peer, slot).
func (c *Conn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
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
	w := c.w
	k := boxKey{c.rank, peer, slot}
	if w.Rendezvous {
		w.mu.Lock()
		b := w.box(k)
		w.mu.Unlock()
		select {
		case <-b.posted:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-w.dead[c.rank]:
			return c.aborted()
		}
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	msg := w.pool.get(n)[:0]
	for _, b := range bufs {
		msg = append(msg, b...)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.box(k)
	if b.sent || w.done[k] {
		return fmt.Errorf("conntest: duplicate send %d->%d slot %#x", c.rank, peer, slot)
	}
	b.sent, b.msg = true, msg
	close(b.full)
	w.sent[c.rank].Add(int64(n))
	w.messages[c.rank].Add(1)
	return nil
}

// MismatchError is a message whose length does not fit the receive; like
// the transport's, it concerns one exchange only (PairLocal).
type MismatchError struct {
	Src, Dst  int
	Slot      uint32
	Got, Want int
	UpTo      bool
}

func (e *MismatchError) Error() string {
	if e.UpTo {
		return fmt.Sprintf("conntest: %d->%d slot %#x: message has %d bytes, receive buffer only %d", e.Src, e.Dst, e.Slot, e.Got, e.Want)
	}
	return fmt.Sprintf("conntest: %d->%d slot %#x: message has %d bytes, receive buffer %d", e.Src, e.Dst, e.Slot, e.Got, e.Want)
}

// PairLocal reports that the error concerns this exchange only.
func (e *MismatchError) PairLocal() bool { return true }

// Recv receives message (peer, slot), whose length must be len(buf).
func (c *Conn) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	_, err := c.recv(ctx, peer, slot, buf, false)
	return err
}

// RecvUpTo receives message (peer, slot) of at most len(buf) bytes.
func (c *Conn) RecvUpTo(ctx context.Context, peer int, slot uint32, buf []byte) (int, error) {
	return c.recv(ctx, peer, slot, buf, true)
}

func (c *Conn) recv(ctx context.Context, peer int, slot uint32, buf []byte, upTo bool) (int, error) {
	c.pause()
	if err := c.check(peer, slot, false); err != nil {
		return 0, err
	}
	w := c.w
	k := boxKey{peer, c.rank, slot}
	w.mu.Lock()
	b := w.box(k)
	if b.taken || w.done[k] {
		w.mu.Unlock()
		return 0, fmt.Errorf("conntest: duplicate recv %d->%d slot %#x", peer, c.rank, slot)
	}
	b.taken = true
	close(b.posted)
	w.mu.Unlock()
	select {
	case <-b.full:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-w.dead[c.rank]:
		return 0, c.aborted()
	}
	w.mu.Lock()
	msg := b.msg
	delete(w.boxes, k)
	w.done[k] = true
	w.mu.Unlock()
	defer w.pool.put(msg)
	if w.Corrupt != nil {
		msg = w.Corrupt(peer, c.rank, slot, msg)
	}
	if len(msg) != len(buf) && (!upTo || len(msg) > len(buf)) {
		return 0, &MismatchError{Src: peer, Dst: c.rank, Slot: slot, Got: len(msg), Want: len(buf), UpTo: upTo}
	}
	return copy(buf, msg), nil
}

// bufPool recycles message buffers by power-of-two class, so benchmarks
// measure the algorithms rather than the allocator.
type bufPool struct {
	classes [40]sync.Pool
}

func (p *bufPool) get(n int) []byte {
	if n == 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		return (*v)[:n]
	}
	return make([]byte, n, 1<<c)
}

func (p *bufPool) put(b []byte) {
	if cap(b) == 0 || cap(b)&(cap(b)-1) != 0 {
		return
	}
	b = b[:cap(b)]
	p.classes[bits.Len(uint(cap(b)-1))].Put(&b)
}
