package conntest

import (
	"io"
	"net"
	"testing"
)

// TamperProxy listens on loopback and forwards each connection to target,
// flipping one bit of the stream the client sends once skip bytes have gone
// by (so past a handshake): a byte changed on the wire. It returns the
// address to dial instead of target.
func TamperProxy(tb testing.TB, target string, skip int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(in, out); in.Close() }()
			go forwardFlipped(in, out, skip)
		}
	}()
	return ln.Addr().String()
}

func forwardFlipped(in, out net.Conn, skip int) {
	defer out.Close()
	buf := make([]byte, 64<<10)
	seen, flipped := 0, false
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if !flipped && seen+n > skip {
				buf[max(skip-seen, 0)] ^= 0x40
				flipped = true
			}
			seen += n
			if _, werr := out.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
