package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/zlog"
)

// handshakeTimeout bounds how long an incoming connection may take to
// authenticate, so a silent stranger cannot hold resources.
const handshakeTimeout = 10 * time.Second

// Endpoint is the process's listener, shared by every group: a group costs
// no socket until one of its pairs is first used.
type Endpoint struct {
	ln   net.Listener
	addr string

	mu     sync.Mutex
	meshes map[meshID]*Mesh

	refusals *refusalLog
}

type meshID struct {
	name string
	rank int
}

var (
	sharedMu sync.Mutex
	shared   *Endpoint
)

// Shared returns the process's endpoint, starting its listener on first use
// on the address rendezvous.LocalIP chooses.
func Shared() (*Endpoint, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		return shared, nil
	}
	ip, how, err := rendezvous.LocalIP()
	if err != nil {
		return nil, err
	}
	ep, err := Listen(ip.String())
	if err != nil {
		return nil, err
	}
	zlog.Process.Infof("listening on %s (interface chosen by %s)", ep.Addr(), how)
	shared = ep
	return ep, nil
}

// Listen starts an endpoint on host with an ephemeral port. Tests use it to
// run several endpoints in one process.
func Listen(host string) (*Endpoint, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("zipccl: listening on %s: %w", host, err)
	}
	ep := &Endpoint{ln: ln, meshes: map[meshID]*Mesh{}, refusals: newRefusalLog()}
	port := ln.Addr().(*net.TCPAddr).Port
	ep.addr = net.JoinHostPort(host, strconv.Itoa(port))
	go ep.acceptLoop()
	return ep, nil
}

// Addr is the host:port peers dial.
func (ep *Endpoint) Addr() string { return ep.addr }

// Close stops the listener (tests only: the shared endpoint lives as long as
// the process).
func (ep *Endpoint) Close() error { return ep.ln.Close() }

func (ep *Endpoint) register(m *Mesh) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	id := meshID{m.cfg.Name, m.cfg.Rank}
	if _, dup := ep.meshes[id]; dup {
		return fmt.Errorf("zipccl: group %q already has a live communicator for rank %d in this process", m.cfg.Name, m.cfg.Rank)
	}
	ep.meshes[id] = m
	return nil
}

func (ep *Endpoint) unregister(m *Mesh) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	id := meshID{m.cfg.Name, m.cfg.Rank}
	if ep.meshes[id] == m {
		delete(ep.meshes, id)
	}
}

func (ep *Endpoint) lookup(name string, rank int) *Mesh {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.meshes[meshID{name, rank}]
}

func (ep *Endpoint) acceptLoop() {
	for {
		c, err := ep.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. EMFILE): back off rather than spin.
			zlog.Process.Warnf("accept on %s: %v", ep.addr, err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go ep.serve(c)
	}
}

// serve authenticates one incoming connection and hands it to its mesh.
func (ep *Endpoint) serve(c net.Conn) {
	remote := c.RemoteAddr().String()
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	h, err := readHello(c)
	if err != nil {
		ep.refusals.warn(zlog.Process, "refused a connection from %s: %v", remote, err)
		c.Close()
		return
	}
	m := ep.lookup(h.name, int(h.dst))
	if m == nil {
		// The group may simply not exist here yet: the dialer retries.
		zlog.Process.Tracef("connection from %s for group %q rank %d: no such group here yet", remote, h.name, h.dst)
		writeStatus(c, statusUnknown, 0)
		c.Close()
		return
	}
	src := int(h.src)
	if src <= m.cfg.Rank || src >= m.cfg.Size {
		ep.refusals.warn(m.log, "refused a connection from %s claiming rank %d: invalid rank for this pair", remote, src)
		writeStatus(c, statusRefused, 0)
		c.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	secret, err := m.secret(ctx)
	cancel()
	if err != nil {
		m.log.Warnf("connection from %s (rank %d): %v", remote, src, err)
		writeStatus(c, statusUnknown, 0)
		c.Close()
		return
	}
	s, err := serverHandshake(c, h, secret, m.flags())
	var sc net.Conn
	if err == nil {
		c.SetDeadline(time.Time{})
		sc, err = m.secure(c, s, false)
	}
	if err != nil {
		ep.refusals.warn(m.log, "refused a connection from %s claiming to be rank %d: %v", remote, src, err)
		var mm *setupError
		if errors.As(err, &mm) {
			// not authenticated: noted for the ops that wait for this
			// rank, never acted on (a stranger could send it)
			m.refuse(src, mm.msg)
		}
		c.Close()
		return
	}
	m.install(src, sc)
}
