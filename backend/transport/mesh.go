package transport

import (
	"context"
	"fmt"
	"net"
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

func (m *Mesh) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// cancelGrace is how long a cancelled receive lets a message that is
// already streaming into its buffer finish before the connection is cut.
const cancelGrace = 2 * time.Second

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
