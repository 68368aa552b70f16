package transport

// The send side: one writer per connection at a time, for data messages
// and for control frames (acks of reads by descriptor, the CMA hello and
// reply, bye, abort).

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"
)

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
