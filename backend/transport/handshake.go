package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// The handshake proves to both sides that the other knows the group secret
// before any tensor byte is accepted (mutual HMAC-SHA256 over fresh nonces):
//
//	dialer -> listener  hello: "ZCH1" u16 version u16 nameLen u32 src u32 dst [16]nonceC name
//	listener -> dialer  reply: "ZCR1" u8 status [3]pad [16]nonceS [32]HMAC(secret, "zipccl-server" || transcript)
//	dialer -> listener  [32]HMAC(secret, "zipccl-client" || transcript)
//	listener -> dialer  one byte 'K' (accepted)
//
// transcript = name || src || dst || nonceC || nonceS. The listener replies
// with a status other than statusOK, without a MAC, when it cannot serve
// the request (group not created yet, bad ranks).
const (
	helloMagic = 0x3148435a // "ZCH1"
	replyMagic = 0x3152435a // "ZCR1"
	// protocolVersion changes with any message ranks exchange, the
	// engine's included, so that mixed builds fail at connect time
	// (2: the agreement check's record carries the previous call's time
	// and the op's largest payload; 3: an all_to_all is decided on the last
	// one's agreed size and measures the group at any size, so ranks of
	// different builds would run different protocols; 4: the CMA frames).
	protocolVersion = 4
	nonceLen        = 16
	macLen          = sha256.Size
	maxNameLen      = 4096

	statusOK      = 0
	statusUnknown = 1 // no such group/rank here (yet): the dialer retries
	statusRefused = 2 // the request can never succeed
)

var (
	errAuth        = errors.New("zipccl: peer failed authentication (wrong group secret)")
	errUnknown     = errors.New("zipccl: peer does not have this group (yet)")
	errRefused     = errors.New("zipccl: peer refused the connection")
	errBadHandshke = errors.New("zipccl: malformed handshake")
)

type hello struct {
	name     string
	src, dst uint32
	nonce    [nonceLen]byte
}

func mac(secret []byte, role string, h *hello, nonceS []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	m.Write([]byte(h.name))
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], h.src)
	binary.LittleEndian.PutUint32(b[4:], h.dst)
	m.Write(b[:])
	m.Write(h.nonce[:])
	m.Write(nonceS)
	return m.Sum(nil)
}

// clientHandshake runs on the dialing (higher) rank.
func clientHandshake(c net.Conn, name string, src, dst int, secret []byte) error {
	h := hello{name: name, src: uint32(src), dst: uint32(dst)}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return err
	}
	buf := make([]byte, 32+len(name))
	binary.LittleEndian.PutUint32(buf[0:], helloMagic)
	binary.LittleEndian.PutUint16(buf[4:], protocolVersion)
	binary.LittleEndian.PutUint16(buf[6:], uint16(len(name)))
	binary.LittleEndian.PutUint32(buf[8:], h.src)
	binary.LittleEndian.PutUint32(buf[12:], h.dst)
	copy(buf[16:32], h.nonce[:])
	copy(buf[32:], name)
	if _, err := c.Write(buf); err != nil {
		return err
	}
	var rep [8 + nonceLen + macLen]byte
	if _, err := io.ReadFull(c, rep[:8]); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(rep[0:]) != replyMagic {
		return errBadHandshke
	}
	switch rep[4] {
	case statusOK:
	case statusUnknown:
		return errUnknown
	default:
		return errRefused
	}
	if _, err := io.ReadFull(c, rep[8:]); err != nil {
		return err
	}
	nonceS := rep[8 : 8+nonceLen]
	if !hmac.Equal(rep[8+nonceLen:], mac(secret, "zipccl-server", &h, nonceS)) {
		return errAuth
	}
	if _, err := c.Write(mac(secret, "zipccl-client", &h, nonceS)); err != nil {
		return err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("%w: %v", errRefused, err)
	}
	if ack[0] != 'K' {
		return errRefused
	}
	return nil
}

// readHello reads the dialer's first message.
func readHello(c net.Conn) (*hello, error) {
	var b [32]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(b[0:]) != helloMagic {
		return nil, errBadHandshke
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != protocolVersion {
		return nil, fmt.Errorf("%w: protocol version %d, want %d", errBadHandshke, v, protocolVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > maxNameLen {
		return nil, errBadHandshke
	}
	h := &hello{src: binary.LittleEndian.Uint32(b[8:]), dst: binary.LittleEndian.Uint32(b[12:])}
	copy(h.nonce[:], b[16:32])
	name := make([]byte, n)
	if _, err := io.ReadFull(c, name); err != nil {
		return nil, err
	}
	h.name = string(name)
	return h, nil
}

func writeStatus(c net.Conn, status byte) {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], replyMagic)
	b[4] = status
	c.Write(b[:])
}

// serverHandshake authenticates the dialer once the group is known.
func serverHandshake(c net.Conn, h *hello, secret []byte) error {
	var b [8 + nonceLen + macLen]byte
	binary.LittleEndian.PutUint32(b[0:], replyMagic)
	b[4] = statusOK
	nonceS := b[8 : 8+nonceLen]
	if _, err := rand.Read(nonceS); err != nil {
		return err
	}
	copy(b[8+nonceLen:], mac(secret, "zipccl-server", h, nonceS))
	if _, err := c.Write(b[:]); err != nil {
		return err
	}
	var got [macLen]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return err
	}
	if !hmac.Equal(got[:], mac(secret, "zipccl-client", h, nonceS)) {
		return errAuth
	}
	_, err := c.Write([]byte{'K'})
	return err
}
