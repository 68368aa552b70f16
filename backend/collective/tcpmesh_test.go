package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// tcpMesh is a minimal loopback TCP transport shaped like the engine's:
// one connection per pair of ranks, a reader goroutine per connection that
// reads a message straight into the posted receive buffer when there is one
// and into a temporary buffer otherwise, and writev sends serialised per
// peer. It exists so benchmarks see real socket costs and whether receives
// are posted in time (an unexpected message costs an extra copy).
type tcpMesh struct {
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
	unexpected int
}

type tcpReq struct {
	buf  []byte
	done chan error
}

const tcpHeader = 8 + 4 + 8

// tcpBuf, when > 0, sets the sockets' kernel buffer sizes.
var tcpBuf = 0

func newTCPMesh(tb testing.TB, n int) *tcpMesh {
	tb.Helper()
	m := &tcpMesh{ranks: make([]*tcpRank, n)}
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns[i] = ln
		m.ranks[i] = &tcpRank{rank: i, n: n, conns: make([]net.Conn, n), wmu: make([]sync.Mutex, n),
			posted: map[tcpKey]*tcpReq{}, unexp: map[tcpKey][]byte{}}
	}
	var wg sync.WaitGroup
	for i := range n {
		// Rank i accepts from every lower rank and dials every higher one.
		wg.Go(func() {
			for range i {
				c, err := lns[i].Accept()
				if err != nil {
					panic(err)
				}
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					panic(err)
				}
				m.ranks[i].conns[b[0]] = c
			}
		})
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			c, err := net.Dial("tcp", lns[j].Addr().String())
			if err != nil {
				tb.Fatal(err)
			}
			if _, err := c.Write([]byte{byte(i)}); err != nil {
				tb.Fatal(err)
			}
			m.ranks[i].conns[j] = c
		}
	}
	wg.Wait()
	for _, ln := range lns {
		ln.Close()
	}
	for _, r := range m.ranks {
		for p, c := range r.conns {
			if c != nil {
				if tcpBuf > 0 {
					c.(*net.TCPConn).SetReadBuffer(tcpBuf)
					c.(*net.TCPConn).SetWriteBuffer(tcpBuf)
				}
				r.readers.Go(func() { r.readLoop(p, c) })
			}
		}
	}
	return m
}

func (m *tcpMesh) close() {
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
			r.unexpected++
		}
		r.mu.Unlock()
		if req != nil && len(req.buf) == n {
			_, err := io.ReadFull(c, req.buf)
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
			req.done <- r.fill(req.buf, buf)
		}
	}
}

func (r *tcpRank) fill(dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("tcpmesh: length %d, want %d", len(src), len(dst))
	}
	copy(dst, src)
	return nil
}

// conn returns rank's Conn for the operation with sequence number seq.
func (m *tcpMesh) conn(rank int, seq uint64) Conn { return &tcpConn{m.ranks[rank], seq} }

type tcpConn struct {
	r   *tcpRank
	seq uint64
}

func (c *tcpConn) Rank() int { return c.r.rank }
func (c *tcpConn) Size() int { return c.r.n }

func (c *tcpConn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
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
	return err
}

func (c *tcpConn) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	r := c.r
	k := tcpKey{peer, c.seq, slot}
	r.mu.Lock()
	if b, ok := r.unexp[k]; ok {
		delete(r.unexp, k)
		r.mu.Unlock()
		return r.fill(buf, b)
	}
	req := &tcpReq{buf: buf, done: make(chan error, 1)}
	r.posted[k] = req
	r.mu.Unlock()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		r.mu.Lock()
		_, still := r.posted[k]
		delete(r.posted, k)
		r.mu.Unlock()
		if still {
			return context.Cause(ctx)
		}
		return <-req.done // the reader is already filling buf
	}
}

// The TCP mesh carries a real collective correctly.
func TestTCPMesh(t *testing.T) {
	setTuning(t, false)
	m := newTCPMesh(t, 3)
	defer m.close()
	xs := [][]byte{make([]byte, 4000), make([]byte, 4000), make([]byte, 4000)}
	for r, x := range xs {
		for i := range x {
			x[i] = byte(r + i)
		}
	}
	want := refAllReduce(2, 0, [][]byte{clone(xs[0]), clone(xs[1]), clone(xs[2])}, false)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r := range 3 {
		wg.Go(func() {
			errs[r] = AllReduce(context.Background(), m.conn(r, 1), Args{DType: 2, In: [][]byte{xs[r]}, Out: [][]byte{xs[r]}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		sameBytes(t, "tcp allreduce", xs[r], want)
	}
}

func benchTCP(b *testing.B, n, size int, op opFunc, mk func(r int) Args) {
	m := newTCPMesh(b, n)
	defer m.close()
	args := make([]Args, n)
	for r := range n {
		args[r] = mk(r)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				if err := op(context.Background(), m.conn(r, uint64(i)), args[r]); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	unexp := 0
	for _, r := range m.ranks {
		unexp += r.unexpected
	}
	b.ReportMetric(float64(unexp)/float64(b.N), "unexpected/op")
}

var tcpSizes = []int{1 << 20, 16 << 20, 64 << 20, 256 << 20}

// BenchmarkTCPAllReduce runs float32 all-reduce over loopback TCP, to be
// compared with gloo on the same machine.
func BenchmarkTCPAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range tcpSizes {
			b.Run(fmt.Sprintf("n%d/%dMiB", n, size>>20), func(b *testing.B) {
				pool := NewPool()
				benchTCP(b, n, size, AllReduce, func(r int) Args {
					buf := make([]byte, size)
					return Args{DType: 1, In: [][]byte{buf}, Out: [][]byte{buf}, Pool: pool}
				})
			})
		}
	}
}

// BenchmarkTCPAllGather runs all-gather with a total output of size bytes.
func BenchmarkTCPAllGather(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range tcpSizes {
			b.Run(fmt.Sprintf("n%d/%dMiB", n, size>>20), func(b *testing.B) {
				pool := NewPool()
				benchTCP(b, n, size, AllGather, func(r int) Args {
					out := make([][]byte, n)
					for j := range out {
						out[j] = make([]byte, size/n)
					}
					return Args{DType: 1, In: [][]byte{make([]byte, size/n)}, Out: out, Pool: pool}
				})
			})
		}
	}
}

// BenchmarkTCPRingRaw is the floor for BenchmarkTCPAllReduce: every rank
// streams the bytes a ring all-reduce sends, 2(n-1)/n of the buffer, to its
// successor while receiving as much from its predecessor, with no
// dependencies between messages and no reduction.
func BenchmarkTCPRingRaw(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range tcpSizes {
			b.Run(fmt.Sprintf("n%d/%dMiB", n, size>>20), func(b *testing.B) {
				m := newTCPMesh(b, n)
				defer m.close()
				total := 2 * (n - 1) * (size / n)
				seg := 2 << 20
				src, dst := make([][]byte, n), make([][]byte, n)
				for r := range n {
					src[r], dst[r] = make([]byte, seg), make([]byte, seg)
				}
				b.SetBytes(int64(size))
				for i := range b.N {
					var wg sync.WaitGroup
					for r := range n {
						c := m.conn(r, uint64(i))
						wg.Go(func() {
							for k := 0; k*seg < total; k++ {
								_ = c.Send(context.Background(), (r+1)%n, Slot(0, k), src[r][:min(seg, total-k*seg)])
							}
						})
						wg.Go(func() {
							for k := 0; k*seg < total; k++ {
								_ = c.Recv(context.Background(), (r+n-1)%n, Slot(0, k), dst[r][:min(seg, total-k*seg)])
							}
						})
					}
					wg.Wait()
				}
			})
		}
	}
}
