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

// The handshake proves to both sides that the other knows the pair key (the
// group secret, or a key derived from it and the pre-shared key: auth.go)
// before any tensor byte is accepted (mutual HMAC-SHA256 over fresh nonces):
//
//	dialer -> listener  hello: "ZCH1" u16 version u16 nameLen u32 src u32 dst [16]nonceC
//	                    u8 flags [3]pad name
//	listener -> dialer  reply: "ZCR1" u8 status u8 flags [2]pad [16]nonceS
//	                    [32]HMAC(key, "zipccl-server" || transcript)
//	dialer -> listener  [32]HMAC(key, "zipccl-client" || transcript)
//	listener -> dialer  one byte 'K' (accepted)
//
// transcript = name || src || dst || nonceC || nonceS. flags say whether
// the side has a pre-shared key and encrypts; the listener answers
// statusMismatch (with its flags, without a MAC) when they differ from its
// own, so both sides can say what is wrong. It replies with another status
// other than statusOK, also without a MAC, when it cannot serve the
// request (group not created yet, bad ranks). With encryption, both sides
// then derive one AES-GCM key per direction from the pair key and the
// nonces (seal.go).
const (
	helloMagic = 0x3148435a // "ZCH1"
	replyMagic = 0x3152435a // "ZCR1"
	// protocolVersion changes with any message ranks exchange, the
	// engine's included, so that mixed builds fail at connect time
	// (2: the agreement check's record carries the previous call's time
	// and the op's largest payload; 3: an all_to_all is decided on the last
	// one's agreed size and measures the group at any size, so ranks of
	// different builds would run different protocols; 4: the CMA frames;
	// 5: the handshake's flags, the pre-shared key, encryption).
	protocolVersion = 5
	nonceLen        = 16
	macLen          = sha256.Size
	maxNameLen      = 4096

	statusOK       = 0
	statusUnknown  = 1 // no such group/rank here (yet): the dialer retries
	statusRefused  = 2 // the request can never succeed
	statusMismatch = 3 // the sides' flags differ (a key, encryption)
)

var (
	errAuth        = errors.New("zipccl: peer failed authentication (wrong group secret, or a different auth key)")
	errUnknown     = errors.New("zipccl: peer does not have this group (yet)")
	errRefused     = errors.New("zipccl: peer refused the connection")
	errBadHandshke = errors.New("zipccl: malformed handshake")
)

// setupError is a handshake refused because the two sides are set up
// differently; it says how.
type setupError struct{ msg string }

func (e *setupError) Error() string { return "zipccl: " + e.msg }

type hello struct {
	name     string
	src, dst uint32
	nonce    [nonceLen]byte
	flags    byte
}

func mac(key []byte, role string, h *hello, nonceS []byte) []byte {
	m := hmac.New(sha256.New, key)
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

// session is what an authenticated handshake leaves: the transcript the
// encryption keys are derived from.
type session struct {
	key    []byte
	h      *hello
	nonceS []byte
}

// clientHandshake runs on the dialing (higher) rank.
func clientHandshake(c net.Conn, name string, src, dst int, key []byte, flags byte) (*session, error) {
	h := &hello{name: name, src: uint32(src), dst: uint32(dst), flags: flags}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, 36+len(name))
	binary.LittleEndian.PutUint32(buf[0:], helloMagic)
	binary.LittleEndian.PutUint16(buf[4:], protocolVersion)
	binary.LittleEndian.PutUint16(buf[6:], uint16(len(name)))
	binary.LittleEndian.PutUint32(buf[8:], h.src)
	binary.LittleEndian.PutUint32(buf[12:], h.dst)
	copy(buf[16:32], h.nonce[:])
	buf[32] = flags
	copy(buf[36:], name)
	if _, err := c.Write(buf); err != nil {
		return nil, err
	}
	var rep [8 + nonceLen + macLen]byte
	if _, err := io.ReadFull(c, rep[:8]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(rep[0:]) != replyMagic {
		return nil, errBadHandshke
	}
	switch rep[4] {
	case statusOK:
	case statusUnknown:
		return nil, errUnknown
	case statusMismatch:
		return nil, &setupError{mismatch(flags, rep[5], dst)}
	default:
		return nil, errRefused
	}
	if _, err := io.ReadFull(c, rep[8:]); err != nil {
		return nil, err
	}
	nonceS := rep[8 : 8+nonceLen]
	if !hmac.Equal(rep[8+nonceLen:], mac(key, "zipccl-server", h, nonceS)) {
		return nil, errAuth
	}
	if _, err := c.Write(mac(key, "zipccl-client", h, nonceS)); err != nil {
		return nil, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errRefused, err)
	}
	if ack[0] != 'K' {
		return nil, errRefused
	}
	return &session{key: key, h: h, nonceS: append([]byte(nil), nonceS...)}, nil
}

// readHello reads the dialer's first message.
func readHello(c net.Conn) (*hello, error) {
	var b [36]byte
	if _, err := io.ReadFull(c, b[:32]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(b[0:]) != helloMagic {
		return nil, errBadHandshke
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != protocolVersion {
		return nil, fmt.Errorf("%w: protocol version %d, want %d", errBadHandshke, v, protocolVersion)
	}
	if _, err := io.ReadFull(c, b[32:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > maxNameLen {
		return nil, errBadHandshke
	}
	h := &hello{src: binary.LittleEndian.Uint32(b[8:]), dst: binary.LittleEndian.Uint32(b[12:]), flags: b[32]}
	copy(h.nonce[:], b[16:32])
	name := make([]byte, n)
	if _, err := io.ReadFull(c, name); err != nil {
		return nil, err
	}
	h.name = string(name)
	return h, nil
}

func writeStatus(c net.Conn, status, flags byte) {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], replyMagic)
	b[4] = status
	b[5] = flags
	c.Write(b[:])
}

// serverHandshake authenticates the dialer once the group is known. A
// dialer set up differently is answered statusMismatch and refused with a
// *setupError.
func serverHandshake(c net.Conn, h *hello, key []byte, flags byte) (*session, error) {
	if msg := mismatch(flags, h.flags, int(h.src)); msg != "" {
		writeStatus(c, statusMismatch, flags)
		return nil, &setupError{msg}
	}
	var b [8 + nonceLen + macLen]byte
	binary.LittleEndian.PutUint32(b[0:], replyMagic)
	b[4] = statusOK
	b[5] = flags
	nonceS := b[8 : 8+nonceLen]
	if _, err := rand.Read(nonceS); err != nil {
		return nil, err
	}
	copy(b[8+nonceLen:], mac(key, "zipccl-server", h, nonceS))
	if _, err := c.Write(b[:]); err != nil {
		return nil, err
	}
	var got [macLen]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		return nil, err
	}
	if !hmac.Equal(got[:], mac(key, "zipccl-client", h, nonceS)) {
		return nil, errAuth
	}
	if _, err := c.Write([]byte{'K'}); err != nil {
		return nil, err
	}
	return &session{key: key, h: h, nonceS: append([]byte(nil), nonceS...)}, nil
}
