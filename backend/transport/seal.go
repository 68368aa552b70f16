package transport

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
)

// Encryption (ZIPCCL_ENCRYPT=1, or a group's option encrypt): after the
// handshake everything a pair writes travels in records, each sealed with
// AES-256-GCM (Go's, which uses AES-NI), one key per direction derived with
// HKDF-SHA256 from the pair key and both handshake nonces, and a nonce
// counting the records, so no key and nonce are ever used twice:
//
//	u32 sealed length | sealed bytes (plaintext, then a 16-byte tag)
//
// with the length as the record's additional data. A record that fails to
// open ends the connection (the peer is reported lost, naming it): a byte
// changed on the wire never reaches a tensor. Messages read from a peer's
// memory on the same host (cma.go) do not cross the socket and are not
// sealed.

// maxRecord is the largest plaintext of one record.
const maxRecord = 256 << 10

var errTampered = errors.New("a frame failed authentication: corrupted or tampered with on the wire")

type sealedConn struct {
	net.Conn
	out, in cipher.AEAD

	wmu  sync.Mutex
	wseq uint64
	wbuf []byte

	rseq  uint64
	rbuf  []byte
	plain []byte // opened, not yet read
}

// seal wraps c, on which the handshake recorded in s ran, for the dialer
// (client) or the listener.
func seal(c net.Conn, s *session, client bool) (net.Conn, error) {
	salt := append(append([]byte(nil), s.h.nonce[:]...), s.nonceS...)
	aead := func(info string) (cipher.AEAD, error) {
		k, err := hkdf.Key(sha256.New, s.key, salt, info, 32)
		if err != nil {
			return nil, err
		}
		b, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(b)
	}
	c2s, err := aead("zipccl client to server v1")
	if err != nil {
		return nil, err
	}
	s2c, err := aead("zipccl server to client v1")
	if err != nil {
		return nil, err
	}
	sc := &sealedConn{Conn: c, out: s2c, in: c2s}
	if client {
		sc.out, sc.in = c2s, s2c
	}
	return sc, nil
}

func recordNonce(seq uint64) []byte {
	var n [12]byte
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

// Write seals p in records and writes them; it returns once all are
// written (or with the first error).
func (s *sealedConn) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	done := 0
	for done < len(p) {
		chunk := p[done:min(len(p), done+maxRecord)]
		need := 4 + len(chunk) + s.out.Overhead()
		if cap(s.wbuf) < need {
			s.wbuf = make([]byte, 4+maxRecord+s.out.Overhead())
		}
		b := s.wbuf[:4]
		binary.LittleEndian.PutUint32(b, uint32(len(chunk)+s.out.Overhead()))
		b = s.out.Seal(b, recordNonce(s.wseq), chunk, b[:4])
		s.wseq++
		if _, err := s.Conn.Write(b); err != nil {
			return done, err
		}
		done += len(chunk)
	}
	return done, nil
}

// Read returns opened bytes: the rest of the current record, or the next
// record, opened straight into p when it fits.
func (s *sealedConn) Read(p []byte) (int, error) {
	if len(s.plain) > 0 {
		n := copy(p, s.plain)
		s.plain = s.plain[n:]
		return n, nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	var hdr [4]byte
	if _, err := io.ReadFull(s.Conn, hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if n < s.in.Overhead() || n > maxRecord+s.in.Overhead() {
		return 0, fmt.Errorf("%w (a record of %d bytes)", errTampered, n)
	}
	if cap(s.rbuf) < n {
		s.rbuf = make([]byte, maxRecord+s.in.Overhead())
	}
	sealed := s.rbuf[:n]
	if _, err := io.ReadFull(s.Conn, sealed); err != nil {
		return 0, err
	}
	nonce := recordNonce(s.rseq)
	s.rseq++
	if plainLen := n - s.in.Overhead(); len(p) >= plainLen {
		if _, err := s.in.Open(p[:0], nonce, sealed, hdr[:]); err != nil {
			return 0, errTampered
		}
		return plainLen, nil
	}
	opened, err := s.in.Open(sealed[:0], nonce, sealed, hdr[:])
	if err != nil {
		return 0, errTampered
	}
	k := copy(p, opened)
	s.plain = opened[k:]
	return k, nil
}

// SyscallConn is the socket's, for the same-host probes (hungUp).
func (s *sealedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := s.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("not a socket")
}
