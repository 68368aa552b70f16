package transport

// The mailbox: receives posted by rank and key, matched against arriving
// messages and those that came before their receive.

import (
	"context"
	"errors"
	"time"
)

type message struct {
	h     header
	buf   []byte
	order uint64
}

type recvReq struct {
	buf       []byte
	n         int  // bytes received
	upTo      bool // the message may be shorter than buf
	want      Desc
	checkDesc bool
	// accept, when set, replaces the descriptor and length checks: it
	// sees the incoming descriptor and length and returns the buffer to
	// receive into (of exactly that length) or an error.
	accept   func(d Desc, n uint64) ([]byte, error)
	got      Desc
	key      Key
	peer     int // -1: any source
	order    uint64
	claimed  bool // a reader is filling buf
	finished bool
	src      int
	err      error
	done     chan struct{}
}

func (r *recvReq) finish(src int, err error) {
	r.src, r.err = src, err
	r.finished = true
	close(r.done)
}

// match removes and returns the earliest receive posted for (src, k).
// Called with m.mu held.
func (m *Mesh) match(src int, k Key) *recvReq {
	pk := peerKey{src, k}
	var r *recvReq
	if q := m.posted[pk]; len(q) > 0 {
		r = q[0]
	}
	if k.Kind == P2P {
		if q := m.anyPosted[k.Seq]; len(q) > 0 && (r == nil || q[0].order < r.order) {
			r = q[0]
			m.anyPosted[k.Seq] = q[1:]
			if len(q) == 1 {
				delete(m.anyPosted, k.Seq)
			}
			return r
		}
	}
	if r != nil {
		q := m.posted[pk]
		m.posted[pk] = q[1:]
		if len(q) == 1 {
			delete(m.posted, pk)
		}
	}
	return r
}

func (r *recvReq) check(src int, h *header) error {
	r.got = h.desc
	if r.accept != nil {
		buf, err := r.accept(h.desc, h.length)
		if err != nil {
			return err
		}
		if uint64(len(buf)) != h.length {
			return &MismatchError{Peer: src, Key: r.key, Want: h.desc, Got: h.desc, WantLen: uint64(len(buf)), GotLen: h.length}
		}
		r.buf = buf
		return nil
	}
	badLen := uint64(len(r.buf)) != h.length
	if r.upTo {
		badLen = h.length > uint64(len(r.buf))
	}
	if (r.checkDesc && r.want != h.desc) || badLen {
		return &MismatchError{Peer: src, Key: r.key, Want: r.want, Got: h.desc, WantLen: uint64(len(r.buf)), GotLen: h.length}
	}
	return nil
}

func (r *recvReq) fill(src int, h *header, buf []byte) error {
	if err := r.check(src, h); err != nil {
		return err
	}
	r.n = copy(r.buf, buf)
	return nil
}

// Pending is a posted receive.
type Pending struct {
	m *Mesh
	r *recvReq
}

// Post registers a receive for the message key from peer (or from any peer
// when peer < 0, for P2P keys) into buf, whose length must match the
// message's. When want is not nil the message must carry it as its
// descriptor. Receives posted for the same key are matched in posting
// order, so Post is where ordering is decided; Wait may run elsewhere.
func (m *Mesh) Post(peer int, k Key, buf []byte, want *Desc) *Pending {
	return m.post(peer, k, buf, want, false, nil)
}

// PostUpTo is Post for a message of unknown length up to len(buf), such as
// a compressed payload; Pending.Len tells how much arrived.
func (m *Mesh) PostUpTo(peer int, k Key, buf []byte, want *Desc) *Pending {
	return m.post(peer, k, buf, want, true, nil)
}

// PostAccept is Post where accept chooses the buffer once the message's
// descriptor and length are known (a receiver that accepts several
// encodings of one message). accept runs on a transport goroutine with the
// mesh locked: it must be quick and must not call the mesh.
func (m *Mesh) PostAccept(peer int, k Key, accept func(d Desc, n uint64) ([]byte, error)) *Pending {
	return m.post(peer, k, nil, nil, false, accept)
}

func (m *Mesh) post(peer int, k Key, buf []byte, want *Desc, upTo bool, accept func(Desc, uint64) ([]byte, error)) *Pending {
	r := &recvReq{buf: buf, upTo: upTo, accept: accept, key: k, peer: peer, done: make(chan struct{})}
	if want != nil {
		r.want, r.checkDesc = *want, true
	}
	pd := &Pending{m: m, r: r}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		r.finish(peer, ErrClosed)
		return pd
	}
	if msg, src := m.takeUnexpected(peer, k); msg != nil {
		r.finish(src, r.fill(src, &msg.h, msg.buf))
		return pd
	}
	m.order++
	r.order = m.order
	if peer < 0 {
		m.anyPosted[k.Seq] = append(m.anyPosted[k.Seq], r)
		m.wakeReaders()
		return pd
	}
	p := m.peers[peer]
	if p.state == down {
		r.finish(peer, p.err)
		return pd
	}
	m.ensure(p)
	pk := peerKey{peer, k}
	m.posted[pk] = append(m.posted[pk], r)
	m.wakeReaders()
	return pd
}

// Wait blocks until the message is in the buffer, or ctx ends. It returns
// the source rank. After Wait returns, the buffer is no longer written.
func (pd *Pending) Wait(ctx context.Context) (int, error) {
	m, r := pd.m, pd.r
	select {
	case <-r.done:
		return r.src, r.err
	case <-ctx.Done():
	}
	m.mu.Lock()
	if !r.claimed && !r.finished {
		m.unpost(r)
		m.mu.Unlock()
		return r.peer, context.Cause(ctx)
	}
	src := r.src
	m.mu.Unlock()
	// A message is streaming into buf: the caller must not get buf back
	// while a reader still writes it.
	select {
	case <-r.done:
	case <-time.After(cancelGrace):
		m.markDown(m.peers[src], &PeerError{Rank: src, Err: errors.New("receive cancelled in the middle of a message")}, false)
		<-r.done
	}
	if r.err != nil {
		return src, r.err
	}
	return src, context.Cause(ctx)
}

// Arrived reports, without waiting, whether the message is in the buffer.
func (pd *Pending) Arrived() bool {
	select {
	case <-pd.r.done:
		return pd.r.err == nil
	default:
		return false
	}
}

// Len is the length of the received message, once Wait returned nil.
func (pd *Pending) Len() int { return pd.r.n }

// Desc is the received message's descriptor, once Wait returned nil.
func (pd *Pending) Desc() Desc { return pd.r.got }

// Buf is the buffer the message was received into (the one accept chose).
func (pd *Pending) Buf() []byte { return pd.r.buf[:pd.r.n] }

// Recv is Post followed by Wait.
func (m *Mesh) Recv(ctx context.Context, peer int, k Key, buf []byte, want *Desc) (int, error) {
	return m.Post(peer, k, buf, want).Wait(ctx)
}

// takeUnexpected pops the earliest buffered message for (peer, k); for an
// any-source receive it searches every peer. Called with m.mu held.
func (m *Mesh) takeUnexpected(peer int, k Key) (*message, int) {
	pop := func(pk peerKey) *message {
		q := m.unexp[pk]
		msg := q[0]
		if len(q) == 1 {
			delete(m.unexp, pk)
		} else {
			m.unexp[pk] = q[1:]
		}
		return msg
	}
	if peer >= 0 {
		pk := peerKey{peer, k}
		if len(m.unexp[pk]) == 0 {
			return nil, peer
		}
		return pop(pk), peer
	}
	best := -1
	var bestOrder uint64
	for i := range m.peers {
		if q := m.unexp[peerKey{i, k}]; len(q) > 0 && (best < 0 || q[0].order < bestOrder) {
			best, bestOrder = i, q[0].order
		}
	}
	if best < 0 {
		return nil, -1
	}
	return pop(peerKey{best, k}), best
}

func (m *Mesh) unpost(r *recvReq) {
	remove := func(q []*recvReq) []*recvReq {
		for i, x := range q {
			if x == r {
				return append(q[:i:i], q[i+1:]...)
			}
		}
		return q
	}
	if r.peer >= 0 {
		pk := peerKey{r.peer, r.key}
		if q := remove(m.posted[pk]); len(q) > 0 {
			m.posted[pk] = q
		} else {
			delete(m.posted, pk)
		}
		return
	}
	if q := remove(m.anyPosted[r.key.Seq]); len(q) > 0 {
		m.anyPosted[r.key.Seq] = q
	} else {
		delete(m.anyPosted, r.key.Seq)
	}
}

// repost puts a claimed receive back, first in line for the peer it was
// claimed for, whose message comes again (errResend). Called with m.mu
// held.
func (m *Mesh) repost(r *recvReq) {
	p := m.peers[r.src]
	switch {
	case p.state == down:
		r.finish(r.src, p.err)
		return
	case m.closed:
		r.finish(r.src, ErrClosed)
		return
	}
	r.claimed, r.n, r.peer = false, 0, r.src
	pk := peerKey{r.src, r.key}
	m.posted[pk] = append([]*recvReq{r}, m.posted[pk]...)
	m.wakeReaders()
}
