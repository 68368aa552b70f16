package conntest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// TCPMesh is a minimal loopback TCP transport shaped like the engine's: one
// connection per pair of ranks, a reader goroutine per connection that reads
// a message straight into the posted receive buffer when there is one and
// into a temporary buffer otherwise, and writev sends serialised per peer.
// It exists so benchmarks see real socket costs and whether receives are
// posted in time (an unexpected message costs an extra copy).
type TCPMesh struct {
	ranks []*tcpRank
}

type tcpKey struct {
	peer int
	seq  uint64
	slot uint32
}

type tcpRank struct {
	rank, n int
	conns   []net.Conn
	wmu     []sync.Mutex
	mu      sync.Mutex
	posted  map[tcpKey]*tcpReq
	unexp   map[tcpKey][]byte
	readers sync.WaitGroup
	// unexpected counts messages that arrived before their receive was
	// posted (each one cost an extra copy).
	unexpected atomic.Int64
	sent       atomic.Int64
}

type tcpReq struct {
	buf  []byte
	upTo bool
	n    int
	done chan error
}

const tcpHeader = 8 + 4 + 8

// NewTCPMesh connects n ranks over loopback TCP. sockBuf, when > 0, sets the
// sockets' kernel buffer sizes.
func NewTCPMesh(n, sockBuf int) (*TCPMesh, error) {
	m := &TCPMesh{ranks: make([]*tcpRank, n)}
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns[i] = ln
		m.ranks[i] = &tcpRank{rank: i, n: n, conns: make([]net.Conn, n), wmu: make([]sync.Mutex, n),
			posted: map[tcpKey]*tcpReq{}, unexp: map[tcpKey][]byte{}}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		// Rank i accepts from every lower rank and dials every higher one.
		wg.Go(func() {
			for range i {
				c, err := lns[i].Accept()
				if err != nil {
					errs[i] = err
					return
				}
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					errs[i] = err
					return
				}
				m.ranks[i].conns[b[0]] = c
			}
		})
	}
	var derr error
	for i := range n {
		for j := i + 1; j < n && derr == nil; j++ {
			c, err := net.Dial("tcp", lns[j].Addr().String())
			if err == nil {
				_, err = c.Write([]byte{byte(i)})
			}
			if err != nil {
				derr = err
				break
			}
			m.ranks[i].conns[j] = c
		}
	}
	if derr != nil {
		for _, ln := range lns {
			ln.Close() // unblocks the accepts still waiting
		}
	}
	wg.Wait()
	for _, ln := range lns {
		ln.Close()
	}
	for _, err := range append(errs, derr) {
		if err != nil {
			m.Close()
			return nil, err
		}
	}
	for _, r := range m.ranks {
		for p, c := range r.conns {
			if c != nil {
				if sockBuf > 0 {
					c.(*net.TCPConn).SetReadBuffer(sockBuf)
					c.(*net.TCPConn).SetWriteBuffer(sockBuf)
				}
				r.readers.Go(func() { r.readLoop(p, c) })
			}
		}
	}
	return m, nil
}

// Close closes every connection and waits for the readers.
func (m *TCPMesh) Close() {
	for _, r := range m.ranks {
		for _, c := range r.conns {
			if c != nil {
				c.Close()
			}
		}
	}
	for _, r := range m.ranks {
		r.readers.Wait()
	}
}

// Unexpected is the number of messages that arrived before their receive
// was posted, over all ranks.
func (m *TCPMesh) Unexpected() int64 {
	var t int64
	for _, r := range m.ranks {
		t += r.unexpected.Load()
	}
	return t
}

// SentBytes is the payload bytes sent by all ranks.
func (m *TCPMesh) SentBytes() int64 {
	var t int64
	for _, r := range m.ranks {
		t += r.sent.Load()
	}
	return t
}

func (r *tcpRank) readLoop(peer int, c net.Conn) {
	var h [tcpHeader]byte
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		k := tcpKey{peer, binary.LittleEndian.Uint64(h[0:]), binary.LittleEndian.Uint32(h[8:])}
		n := int(binary.LittleEndian.Uint64(h[12:]))
		r.mu.Lock()
		req := r.posted[k]
		if req != nil {
			delete(r.posted, k)
		} else {
			r.unexpected.Add(1)
		}
		r.mu.Unlock()
		if req != nil && (len(req.buf) == n || req.upTo && n <= len(req.buf)) {
			_, err := io.ReadFull(c, req.buf[:n])
			req.n = n
			req.done <- err
			if err != nil {
				return
			}
			continue
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if req != nil {
			req.done <- fmt.Errorf("tcpmesh: length %d, want %d", n, len(req.buf))
			continue
		}
		r.mu.Lock()
		if req = r.posted[k]; req != nil {
			delete(r.posted, k)
		} else {
			r.unexp[k] = buf
		}
		r.mu.Unlock()
		if req != nil {
			req.done <- req.fill(buf)
		}
	}
}

func (q *tcpReq) fill(src []byte) error {
	if len(q.buf) != len(src) && (!q.upTo || len(src) > len(q.buf)) {
		return fmt.Errorf("tcpmesh: length %d, want %d", len(src), len(q.buf))
	}
	q.n = copy(q.buf, src)
	return nil
}

// Conn returns rank's Conn (a collective.VarConn) for the operation with
// sequence number seq.
func (m *TCPMesh) Conn(rank int, seq uint64) *TCPConn { return &TCPConn{m.ranks[rank], seq} }

// TCPConn is one rank's view of one operation on a TCPMesh.
type TCPConn struct {
	r   *tcpRank
	seq uint64
}

// Rank is this endpoint's rank.
func (c *TCPConn) Rank() int { return c.r.rank }

// Size is the group size.
func (c *TCPConn) Size() int { return c.r.n }

// Send writes the message with one writev.
func (c *TCPConn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	var h [tcpHeader]byte
	binary.LittleEndian.PutUint64(h[0:], c.seq)
	binary.LittleEndian.PutUint32(h[8:], slot)
	binary.LittleEndian.PutUint64(h[12:], uint64(n))
	vec := net.Buffers{h[:]}
	for _, b := range bufs {
		if len(b) > 0 {
			vec = append(vec, b)
		}
	}
	r := c.r
	r.wmu[peer].Lock()
	defer r.wmu[peer].Unlock()
	_, err := vec.WriteTo(r.conns[peer])
	r.sent.Add(int64(n))
	return err
}

// Recv receives a message of exactly len(buf) bytes.
func (c *TCPConn) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	_, err := c.recv(ctx, peer, slot, buf, false)
	return err
}

// RecvUpTo receives a message of at most len(buf) bytes.
func (c *TCPConn) RecvUpTo(ctx context.Context, peer int, slot uint32, buf []byte) (int, error) {
	return c.recv(ctx, peer, slot, buf, true)
}

func (c *TCPConn) recv(ctx context.Context, peer int, slot uint32, buf []byte, upTo bool) (int, error) {
	r := c.r
	k := tcpKey{peer, c.seq, slot}
	req := &tcpReq{buf: buf, upTo: upTo, done: make(chan error, 1)}
	r.mu.Lock()
	if b, ok := r.unexp[k]; ok {
		delete(r.unexp, k)
		r.mu.Unlock()
		err := req.fill(b)
		return req.n, err
	}
	r.posted[k] = req
	r.mu.Unlock()
	select {
	case err := <-req.done:
		return req.n, err
	case <-ctx.Done():
		r.mu.Lock()
		_, still := r.posted[k]
		delete(r.posted, k)
		r.mu.Unlock()
		if still {
			return 0, context.Cause(ctx)
		}
		err := <-req.done // the reader is already filling buf
		return req.n, err
	}
}
