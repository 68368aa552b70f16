package transport

// A peer is one lazily dialled connection of a Mesh: its state, the dial
// (the higher rank of a pair dials), and what happens when it goes down.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

type peerState int

const (
	idle peerState = iota
	dialing
	ready
	down
)

type peer struct {
	rank  int
	state peerState
	conn  net.Conn
	ready chan struct{} // closed when state becomes ready or down
	err   error         // why the peer is down
	wsem  chan struct{} // one writer at a time
	gone  chan struct{} // closed when state becomes down

	// cmaPid is the peer's process, read by descriptor (0: its messages
	// all come on the socket). Owned by the connection's reader.
	cmaPid int
	// cmaOut says the peer reads this side's memory: large sends go by
	// descriptor.
	cmaOut atomic.Bool
	acks   map[uint64]chan uint32 // descriptors awaiting their ack (m.mu)
}

// Connected reports the ranks this mesh currently has a live connection to.
func (m *Mesh) Connected() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, p := range m.peers {
		if p.state == ready {
			out = append(out, p.rank)
		}
	}
	return out
}

// ensure starts connecting to p if this side is the one that dials (the
// higher rank of a pair dials, so two ranks never race to connect). Called
// with m.mu held.
func (m *Mesh) ensure(p *peer) {
	if p.state == idle && m.cfg.Rank > p.rank && !m.closed {
		p.state = dialing
		go m.dial(p)
	}
}

// Connect starts connecting to every peer this rank dials; used before an
// any-source receive, whose sender may be a lower rank waiting for us.
func (m *Mesh) Connect() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.peers {
		if p.rank != m.cfg.Rank {
			m.ensure(p)
		}
	}
}

func (m *Mesh) dial(p *peer) {
	limit := 30 * time.Minute
	if m.cfg.DialTimeout != nil {
		limit = m.cfg.DialTimeout()
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	conn, err := m.dialLoop(ctx, p.rank)
	if err != nil {
		m.markDown(p, &PeerError{Rank: p.rank, Remote: true, Err: err}, false)
		return
	}
	m.install(p.rank, conn)
}

// refusedGrace is how long a peer whose address we know may refuse
// connections before we conclude its process is gone.
const refusedGrace = 5 * time.Second

func (m *Mesh) dialLoop(ctx context.Context, peer int) (net.Conn, error) {
	secret, err := m.secret(ctx)
	if err != nil {
		return nil, err
	}
	addr, err := m.cfg.PeerAddr(ctx, peer)
	if err != nil {
		return nil, err
	}
	backoff := 20 * time.Millisecond
	var firstRefusal time.Time
	var last error
	for {
		if m.isClosed() {
			return nil, ErrClosed
		}
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.SetDeadline(time.Now().Add(handshakeTimeout))
			var s *session
			s, err = clientHandshake(c, m.cfg.Name, m.cfg.Rank, peer, secret, m.flags())
			if err == nil {
				c.SetDeadline(time.Time{})
				var sc net.Conn
				if sc, err = m.secure(c, s, true); err == nil {
					m.log.Tracef("connected to rank %d at %s", peer, addr)
					return sc, nil
				}
			}
			c.Close()
			var mm *setupError
			if errors.Is(err, errAuth) || errors.Is(err, errRefused) || errors.As(err, &mm) {
				return nil, fmt.Errorf("handshake with rank %d at %s: %w", peer, addr, err)
			}
			firstRefusal = time.Time{}
		} else if isRefused(err) {
			if firstRefusal.IsZero() {
				firstRefusal = time.Now()
			} else if time.Since(firstRefusal) > refusedGrace {
				return nil, fmt.Errorf("rank %d is not accepting connections at %s (%v): its process has probably exited", peer, addr, err)
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot connect to rank %d at %s: %v", peer, addr, last)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, errConnRefused)
}

// install adopts an authenticated connection for the pair with src.
func (m *Mesh) install(src int, c net.Conn) {
	m.mu.Lock()
	p := m.peers[src]
	if m.closed || p.state == ready || p.state == down {
		m.mu.Unlock()
		m.log.Warnf("dropping a second connection from rank %d", src)
		c.Close()
		return
	}
	p.conn = c
	p.state = ready
	close(p.ready)
	m.mu.Unlock()
	go m.readLoop(p, c)
	if m.cma {
		if id, _ := localCMA(); id != nil {
			go m.writeControl(p, header{kind: frameCMAHello}, id.hello())
		}
	}
}

// markDown makes p unusable and fails the receives waiting on it. remote
// says whether to report the loss (the peer vanished) or not (we closed).
func (m *Mesh) markDown(p *peer, err error, remote bool) {
	m.mu.Lock()
	if p.state == down {
		m.mu.Unlock()
		return
	}
	wasReady := p.state == ready
	p.state = down
	close(p.gone)
	m.wakeReaders()
	p.err = err
	if p.conn != nil {
		p.conn.Close()
	}
	if !wasReady {
		close(p.ready)
	}
	var fail []*recvReq
	for pk, rs := range m.posted {
		if pk.peer != p.rank {
			continue
		}
		for _, r := range rs {
			if !r.claimed {
				fail = append(fail, r)
			}
		}
		delete(m.posted, pk)
	}
	for _, r := range fail {
		r.finish(p.rank, err)
	}
	closed := m.closed
	m.mu.Unlock()
	if remote && !closed && m.cfg.OnPeerLost != nil {
		m.cfg.OnPeerLost(p.rank, err)
	}
}

// waitReady returns p's connection once established.
func (m *Mesh) waitReady(ctx context.Context, p *peer) (net.Conn, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	m.ensure(p)
	st, conn, err, ch := p.state, p.conn, p.err, p.ready
	m.mu.Unlock()
	switch st {
	case ready:
		return conn, nil
	case down:
		return nil, err
	}
	select {
	case <-ch:
	case <-ctx.Done():
		m.mu.Lock()
		why := m.refused[p.rank]
		m.mu.Unlock()
		if why != "" {
			return nil, fmt.Errorf("%w (no connection with rank %d: it connected and was refused: %s)", context.Cause(ctx), p.rank, why)
		}
		return nil, fmt.Errorf("%w (no connection with rank %d yet)", context.Cause(ctx), p.rank)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.state == down {
		return nil, p.err
	}
	return p.conn, nil
}

// PeerLocality reports whether the connection to peer ends in this
// network namespace: its remote address is a loopback address or one of
// this namespace's own interface addresses. Traffic to such a peer is a
// memory copy by the kernel, not a link. known is false while the
// connection is not established (nothing can be said of it then).
func (m *Mesh) PeerLocality(peer int) (local, known bool) {
	m.mu.Lock()
	conn := m.peers[peer].conn
	m.mu.Unlock()
	if conn == nil {
		return false, false
	}
	ra, ok := conn.RemoteAddr().(*net.TCPAddr)
	return ok && isLocalIP(ra.IP), true
}

func isLocalIP(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func (m *Mesh) peerErr(p *peer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.err
}
