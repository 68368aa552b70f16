package transport

// Each connection has one reader goroutine: it reads frames and delivers
// them to posted receives, or buffers them as unexpected.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// A large message whose receive is not posted yet would be read into a
// fresh buffer (page faults, and garbage) and copied again when the
// receive comes; a send that starts just before its receive is posted is
// the common case (batch_isend_irecv, a pipelined broadcast whose next
// call starts on the root first). So the reader holds such a message in
// the socket for a while, letting TCP flow control stall the sender,
// and reads it straight into the receive if one is posted in time. It
// waits at most about as long as buffering would cost (awaitRate), so a
// message whose receive comes much later, or never (a mismatch, or a
// receive that waits on a later message of this connection), is buffered
// as before and nothing can deadlock.
const (
	awaitMin  = 4 << 20 // above zcoll's segments, whose receives are posted in windows
	awaitRate = 4 << 30 // bytes per second of buffering cost assumed
	awaitMax  = 50 * time.Millisecond
)

// largeBuffered counts messages of at least awaitMin bytes that were
// buffered (for tests).
var largeBuffered atomic.Int64

// awaitPost waits for a receive matching k from src, for a message of n
// bytes. Called and returning with m.mu held; it releases it while waiting.
func (m *Mesh) awaitPost(src int, k Key, n uint64) *recvReq {
	limit := min(time.Duration(float64(n)/awaitRate*float64(time.Second)), awaitMax)
	deadline := time.Now().Add(limit)
	for !m.closed {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if m.posts == nil {
			m.posts = make(chan struct{})
		}
		wake := m.posts
		m.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-wake:
		case <-t.C:
		}
		t.Stop()
		m.mu.Lock()
		if p := m.peers[src]; p.state == down {
			return nil
		}
		if r := m.match(src, k); r != nil {
			return r
		}
	}
	return nil
}

// wakeReaders wakes readers in awaitPost (m.mu held).
func (m *Mesh) wakeReaders() {
	if m.posts != nil {
		close(m.posts)
		m.posts = nil
	}
}

// readLoop owns reading from one connection.
func (m *Mesh) readLoop(p *peer, c net.Conn) {
	var hb [headerLen]byte
	for {
		var h header
		_, err := io.ReadFull(c, hb[:])
		if err == nil {
			err = h.decode(hb[:])
		}
		if err != nil {
			m.readFailed(p, err)
			return
		}
		switch h.kind {
		case frameBye:
			m.markDown(p, &PeerError{Rank: p.rank, Remote: true, Err: errors.New("rank has shut down its communicator")}, false)
			return
		case frameAbort:
			msg := make([]byte, h.length)
			if _, err := io.ReadFull(c, msg); err != nil {
				m.readFailed(p, err)
				return
			}
			if m.cfg.OnAbort != nil {
				m.cfg.OnAbort(p.rank, string(msg))
			}
		case frameCMAHello:
			b := make([]byte, h.length)
			if _, err := io.ReadFull(c, b); err != nil {
				m.readFailed(p, err)
				return
			}
			p.cmaPid = 0
			if m.cma {
				var denied error
				p.cmaPid, denied = probeCMA(b)
				if denied != nil {
					cmaDeniedOnce.Do(func() {
						m.log.Infof("rank %d shares this host and network namespace, but its memory cannot be read (%v): "+
							"large messages between such ranks go through the socket (kernel.yama.ptrace_scope 0 allows the reads)", p.rank, denied)
					})
				}
			}
			m.log.Tracef("rank %d's memory is readable: %v", p.rank, p.cmaPid != 0)
			go m.writeControl(p, header{kind: frameCMAReply, seq: uint64(min(p.cmaPid, 1))}, nil)
		case frameCMAReply:
			p.cmaOut.Store(m.cma && h.seq == 1)
		case frameAck:
			m.mu.Lock()
			ack := p.acks[h.seq]
			delete(p.acks, h.seq)
			m.mu.Unlock()
			if ack != nil {
				ack <- h.slot
			}
		default:
			var src payload = sockPayload{c, h.length}
			if h.flags&flagCMA != 0 {
				if p.cmaPid == 0 {
					m.readFailed(p, fmt.Errorf("%w: a message by descriptor from a process this side cannot read", errBadFrame))
					return
				}
				token, segs, err := readCMADesc(c, h.length)
				if err != nil {
					m.readFailed(p, err)
					return
				}
				src = cmaPayload{m, p, c, token, segs}
			}
			if err := m.deliver(p, &h, src); err != nil {
				m.readFailed(p, err)
				return
			}
		}
	}
}

func (m *Mesh) readFailed(p *peer, err error) {
	m.mu.Lock()
	local := p.state == down || m.closed
	m.mu.Unlock()
	if local {
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("connection closed by peer (process exited?)")
	}
	m.markDown(p, &PeerError{Rank: p.rank, Remote: true, Err: err}, true)
}

// payload is where a data frame's bytes come from: the socket, or the
// sender's memory.
type payload interface {
	read(buf []byte) error
	skip() error
}

type sockPayload struct {
	c net.Conn
	n uint64
}

func (s sockPayload) read(buf []byte) error {
	_, err := io.ReadFull(s.c, buf)
	return err
}

func (s sockPayload) skip() error { return discard(s.c, s.n) }

type cmaPayload struct {
	m     *Mesh
	p     *peer
	c     net.Conn
	token uint64
	segs  []cmaSeg
}

func (s cmaPayload) read(buf []byte) error {
	if hook := cmaBeforeRead.Load(); hook != nil {
		(*hook)()
	}
	err := cmaRead(s.p.cmaPid, buf, s.segs)
	if hook := cmaReadErr.Load(); hook != nil {
		err = (*hook)()
	}
	if err != nil {
		// Memory the kernel cannot pin for another process (a driver's
		// own mappings): the sender writes the message on the socket
		// instead.
		s.m.log.Tracef("rank %d's message must come on the socket: %v", s.p.rank, err)
		go s.m.writeControl(s.p, header{kind: frameAck, seq: s.token, slot: ackResend}, nil)
		return errResend
	}
	// A sender that gave up on its ack cut the connection before its
	// memory could be reused: what was read then may be torn.
	if hungUp(s.c) {
		return errors.New("connection closed while its message was being read")
	}
	cmaReads.Add(1)
	return s.skip()
}

// skip acknowledges without reading: the sender may reuse its memory.
func (s cmaPayload) skip() error {
	go s.m.writeControl(s.p, header{kind: frameAck, seq: s.token, slot: ackRead}, nil)
	return nil
}

// errResend says a message by descriptor could not be read: its sender
// sends it again on the socket, and the receive waits for that.
var errResend = errors.New("message to be sent again on the socket")

// deliver routes one data frame: straight into a posted receive's buffer
// when there is one, else into a buffer kept until the receive is posted.
func (m *Mesh) deliver(p *peer, h *header, src payload) error {
	k := Key{Kind: h.kind, Seq: h.seq, Slot: h.slot}
	m.mu.Lock()
	if h.kind == Coll && h.seq < m.collFloor {
		m.mu.Unlock()
		return src.skip()
	}
	r := m.match(p.rank, k)
	if r == nil && h.length >= awaitMin {
		if r = m.awaitPost(p.rank, k, h.length); r == nil && h.kind == Coll && h.seq < m.collFloor {
			m.mu.Unlock()
			return src.skip()
		}
	}
	if r != nil {
		if err := r.check(p.rank, h); err != nil {
			r.finish(p.rank, err)
			m.mu.Unlock()
			return src.skip()
		}
		r.claimed = true
		r.src = p.rank
		r.n = int(h.length)
		m.mu.Unlock()
		if err := src.read(r.buf[:r.n]); err == errResend {
			m.mu.Lock()
			m.repost(r)
			m.mu.Unlock()
			return nil
		} else if err != nil {
			m.mu.Lock()
			r.finish(p.rank, &PeerError{Rank: p.rank, Remote: true, Err: err})
			m.mu.Unlock()
			return err
		}
		m.mu.Lock()
		r.finish(p.rank, nil)
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()

	if h.length >= awaitMin {
		largeBuffered.Add(1)
	}
	buf := make([]byte, h.length)
	if err := src.read(buf); err == errResend {
		return nil
	} else if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.kind == Coll && h.seq < m.collFloor {
		return nil
	}
	if r := m.match(p.rank, k); r != nil {
		r.finish(p.rank, r.fill(p.rank, h, buf))
		return nil
	}
	m.order++
	pk := peerKey{p.rank, k}
	m.unexp[pk] = append(m.unexp[pk], &message{h: *h, buf: buf, order: m.order})
	return nil
}

func discard(c net.Conn, n uint64) error {
	_, err := io.CopyN(io.Discard, c, int64(n))
	return err
}
