package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zipccl/zipccl/backend/zlog"
)

// Config describes one rank of one group.
type Config struct {
	Name       string
	Rank, Size int
	// Secret returns the group secret (fetched lazily from the store).
	Secret func(ctx context.Context) ([]byte, error)
	// PeerAddr returns the address a peer published.
	PeerAddr func(ctx context.Context, peer int) (string, error)
	// OnPeerLost is called once, from a transport goroutine, when the
	// connection to a peer breaks without a goodbye.
	OnPeerLost func(peer int, err error)
	// OnAbort is called when a peer reports that the group is broken.
	OnAbort func(peer int, reason string)
	// DialTimeout bounds how long a pair keeps trying to connect.
	DialTimeout func() time.Duration
	Log         *zlog.Logger
	// AuthKey is the pre-shared key (auth.go; nil: none), Encrypt whether
	// the pairs seal what they write (seal.go). Every rank must agree on
	// both; a pair that does not fails at its handshake, saying why.
	AuthKey []byte
	Encrypt bool
}

// Mesh is one rank's set of lazily connected pairs within a group, plus the
// mailbox that matches incoming messages to receives.
type Mesh struct {
	cfg Config
	ep  *Endpoint
	log *zlog.Logger

	secretMu sync.Mutex
	secretV  []byte // the pair key (auth.go)
	// refused: why connections claiming to be a rank were refused (a
	// different set-up), for the errors of ops that then wait in vain.
	refused map[int]string // m.mu

	mu        sync.Mutex
	closed    bool
	peers     []*peer
	posted    map[peerKey][]*recvReq
	anyPosted map[uint64][]*recvReq // any-source receives by p2p tag
	unexp     map[peerKey][]*message
	order     uint64 // posting and arrival order, for any-source matching
	collFloor uint64 // collective messages with seq below this are stale
	// posts is closed (and cleared) by the next post, close or peer loss,
	// to wake a reader waiting for a large message's receive (awaitPost).
	posts chan struct{}

	cma    bool          // offer and read messages by descriptor (cma.go)
	tokens atomic.Uint64 // names messages sent by descriptor
}

type peerKey struct {
	peer int
	key  Key
}

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

// NewMesh registers a group's rank on the endpoint. It connects nothing.
func NewMesh(ep *Endpoint, cfg Config) (*Mesh, error) {
	if cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("zipccl: rank %d out of range for group size %d", cfg.Rank, cfg.Size)
	}
	if cfg.Log == nil {
		cfg.Log = zlog.New(cfg.Rank, cfg.Name)
	}
	m := &Mesh{
		cfg:       cfg,
		ep:        ep,
		log:       cfg.Log,
		peers:     make([]*peer, cfg.Size),
		posted:    map[peerKey][]*recvReq{},
		anyPosted: map[uint64][]*recvReq{},
		unexp:     map[peerKey][]*message{},
	}
	for i := range m.peers {
		m.peers[i] = &peer{rank: i, ready: make(chan struct{}), wsem: make(chan struct{}, 1), gone: make(chan struct{}), acks: map[uint64]chan uint32{}}
	}
	m.cma = cmaEnabled()
	if err := ep.register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Rank and Size of this mesh.
func (m *Mesh) Rank() int { return m.cfg.Rank }

// Size is the number of ranks in the group.
func (m *Mesh) Size() int { return m.cfg.Size }

// secret is the key the pairs authenticate with: the group secret, or the
// key derived from it and the pre-shared key.
func (m *Mesh) secret(ctx context.Context) ([]byte, error) {
	m.secretMu.Lock()
	defer m.secretMu.Unlock()
	if m.secretV != nil {
		return m.secretV, nil
	}
	s, err := m.cfg.Secret(ctx)
	if err != nil {
		return nil, err
	}
	if s, err = pairKey(s, m.cfg.AuthKey); err != nil {
		return nil, err
	}
	m.secretV = s
	return s, nil
}

// HasAuthKey says whether the pairs authenticate with a pre-shared key too.
func (m *Mesh) HasAuthKey() bool { return m.cfg.AuthKey != nil }

// Encrypts says whether the pairs seal what they write.
func (m *Mesh) Encrypts() bool { return m.cfg.Encrypt }

// flags are this side's handshake flags.
func (m *Mesh) flags() byte {
	var f byte
	if m.cfg.AuthKey != nil {
		f |= flagHasKey
	}
	if m.cfg.Encrypt {
		f |= flagEncrypt
	}
	return f
}

// refuse records why a connection claiming to be rank src was refused.
func (m *Mesh) refuse(src int, why string) {
	m.mu.Lock()
	if m.refused == nil {
		m.refused = map[int]string{}
	}
	m.refused[src] = why
	m.mu.Unlock()
}

// Refusals says which ranks' connections this side refused and why (""
// when none): what an op that waited for them in vain adds to its error.
func (m *Mesh) Refusals() string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for r := range m.peers {
		if why, ok := m.refused[r]; ok {
			out = append(out, fmt.Sprintf("a connection from rank %d was refused (%s)", r, why))
		}
	}
	return strings.Join(out, "; ")
}

// secure seals c after its handshake when the group encrypts.
func (m *Mesh) secure(c net.Conn, s *session, client bool) (net.Conn, error) {
	if !m.cfg.Encrypt {
		return c, nil
	}
	return seal(c, s, client)
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

func (m *Mesh) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

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

func discard(c net.Conn, n uint64) error {
	_, err := io.CopyN(io.Discard, c, int64(n))
	return err
}

// cancelGrace is how long a cancelled receive lets a message that is
// already streaming into its buffer finish before the connection is cut.
const cancelGrace = 2 * time.Second

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

// aLongTimeAgo is a deadline that makes blocked socket calls return now.
var aLongTimeAgo = time.Unix(1, 0)

// Send writes one message to peer. Cancelling ctx while bytes are being
// written cuts the connection (a partial frame cannot be recovered).
func (m *Mesh) Send(ctx context.Context, peer int, k Key, desc *Desc, bufs ...[]byte) error {
	if peer == m.cfg.Rank || peer < 0 || peer >= m.cfg.Size {
		return fmt.Errorf("zipccl: invalid destination rank %d (group of %d, this is rank %d)", peer, m.cfg.Size, m.cfg.Rank)
	}
	p := m.peers[peer]
	conn, err := m.waitReady(ctx, p)
	if err != nil {
		return err
	}
	var hb [headerLen]byte
	vec := net.Buffers{hb[:]}
	var n uint64
	for _, b := range bufs {
		if len(b) > 0 {
			n += uint64(len(b))
			vec = append(vec, b)
		}
	}
	h := header{kind: k.Kind, slot: k.Slot, seq: k.Seq, length: n}
	if desc != nil {
		h.desc = *desc
	}
	segs := vec[1:]
	if n < cmaMin || len(segs) > cmaMaxSegs || !p.cmaOut.Load() {
		h.encode(hb[:])
		return m.write(ctx, p, conn, vec)
	}
	token, ack := m.tokens.Add(1), make(chan uint32, 1)
	m.mu.Lock()
	p.acks[token] = ack
	m.mu.Unlock()
	h.flags = flagCMA
	h.encode(hb[:])
	if err := m.write(ctx, p, conn, net.Buffers{hb[:], encodeCMADesc(token, segs)}); err != nil {
		return err
	}
	// Not holding the writer: the peer's ack may wait for its own writer,
	// whose message needs our reader, which needs nothing.
	status, err := m.awaitAck(ctx, p, ack)
	if err == nil && status == ackResend {
		h.flags = 0
		h.encode(hb[:])
		err = m.write(ctx, p, conn, append(net.Buffers{hb[:]}, segs...))
	}
	// The peer reads segs until it acks. They are heap memory (Send's
	// bufs escape through write), which Go never moves, or C memory.
	runtime.KeepAlive(segs)
	return err
}

// write writes one frame when the connection's writer is free.
func (m *Mesh) write(ctx context.Context, p *peer, conn net.Conn, vec net.Buffers) error {
	select {
	case p.wsem <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-p.wsem }()
	// On cancellation a write in progress gets cancelGrace to finish: the
	// receiver always drains its socket, so a healthy peer completes it and
	// the connection survives; a stuck one is cut, since a partial frame
	// cannot be recovered.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.SetWriteDeadline(time.Now().Add(cancelGrace))
		close(fired)
	})
	_, err := vec.WriteTo(conn)
	if !stop() {
		<-fired
		conn.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		if ctx.Err() != nil {
			cause := context.Cause(ctx)
			m.markDown(p, &PeerError{Rank: p.rank, Err: fmt.Errorf("send cancelled mid-message: %v", cause)}, false)
			return cause
		}
		m.markDown(p, &PeerError{Rank: p.rank, Remote: true, Err: err}, true)
		return &PeerError{Rank: p.rank, Remote: true, Err: err}
	}
	return nil
}

// awaitAck waits until the peer has read a message sent by descriptor, or
// asked for it on the socket, and returns its answer (ackRead, ackResend).
// Cancelled, it gives the peer cancelGrace to finish, as a socket write
// gets, then cuts the connection: the peer's reader notices, and fails
// the message rather than keep what it read.
func (m *Mesh) awaitAck(ctx context.Context, p *peer, ack chan uint32) (uint32, error) {
	select {
	case st := <-ack:
		return st, nil
	case <-p.gone:
		return 0, m.peerErr(p)
	case <-ctx.Done():
	}
	t := time.NewTimer(cancelGrace)
	defer t.Stop()
	select {
	case <-ack:
	case <-p.gone:
	case <-t.C:
		m.markDown(p, &PeerError{Rank: p.rank, Err: fmt.Errorf("send cancelled while the peer had not read the message: %v", context.Cause(ctx))}, false)
	}
	return 0, context.Cause(ctx)
}

func (m *Mesh) peerErr(p *peer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.err
}

// writeControl writes a frame of the pair's protocol (no message) when the
// connection's writer is free.
func (m *Mesh) writeControl(p *peer, h header, payload []byte) {
	m.mu.Lock()
	conn := p.conn
	m.mu.Unlock()
	h.length = uint64(len(payload))
	var hb [headerLen]byte
	h.encode(hb[:])
	_ = m.write(context.Background(), p, conn, net.Buffers{hb[:], payload}) // a failure marks p down
}

// SetCollFloor declares every collective message with a sequence number
// below seq stale: buffered ones are dropped and late ones discarded.
func (m *Mesh) SetCollFloor(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq <= m.collFloor {
		return
	}
	m.collFloor = seq
	for pk := range m.unexp {
		if pk.key.Kind == Coll && pk.key.Seq < seq {
			delete(m.unexp, pk)
		}
	}
}

// SendAbort tells every connected peer that the group is broken, best
// effort and bounded in time.
func (m *Mesh) SendAbort(reason string) {
	if len(reason) > maxAbortLen {
		reason = reason[:maxAbortLen]
	}
	m.broadcastControl(frameAbort, []byte(reason))
}

func (m *Mesh) broadcastControl(kind Kind, payload []byte) {
	m.mu.Lock()
	var targets []*peer
	for _, p := range m.peers {
		if p.state == ready {
			targets = append(targets, p)
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case p.wsem <- struct{}{}:
			case <-time.After(time.Second):
				return
			}
			defer func() { <-p.wsem }()
			h := header{kind: kind, length: uint64(len(payload))}
			var hb [headerLen]byte
			h.encode(hb[:])
			p.conn.SetWriteDeadline(time.Now().Add(time.Second))
			vec := net.Buffers{hb[:], payload}
			vec.WriteTo(p.conn)
			p.conn.SetWriteDeadline(time.Time{})
		}()
	}
	wg.Wait()
}

// Close says goodbye to connected peers, closes every connection, fails
// pending receives and unregisters the mesh.
func (m *Mesh) Close() {
	if m.markClosed() {
		// Closed first, so that the peers hanging up after our goodbye
		// is not mistaken for a loss.
		m.broadcastControl(frameBye, nil)
		m.teardown(ErrClosed)
	}
}

// Abort closes every connection at once, without a goodbye.
func (m *Mesh) Abort(err error) {
	if m.markClosed() {
		m.teardown(err)
	}
}

func (m *Mesh) markClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.closed = true
	m.wakeReaders()
	return true
}

func (m *Mesh) teardown(err error) {
	m.mu.Lock()
	peers := append([]*peer(nil), m.peers...)
	var pending []*recvReq
	for _, q := range m.posted {
		pending = append(pending, q...)
	}
	for _, q := range m.anyPosted {
		pending = append(pending, q...)
	}
	m.posted = map[peerKey][]*recvReq{}
	m.anyPosted = map[uint64][]*recvReq{}
	m.unexp = map[peerKey][]*message{}
	m.mu.Unlock()
	m.ep.unregister(m)
	for _, p := range peers {
		m.markDown(p, &PeerError{Rank: p.rank, Err: err}, false)
	}
	m.mu.Lock()
	for _, r := range pending {
		if !r.claimed && !r.finished {
			r.finish(r.peer, err)
		}
	}
	m.mu.Unlock()
}
