package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/rendezvous"
)

// The attack the pre-shared key stops: a process that can reach the Store,
// and nothing more, reads the group secret and passes the handshake as a
// rank. Without a key it is admitted; with one it is refused (it cannot
// derive the pair key from the Store alone).
func TestStoreReaderIsAdmittedWithoutKeyRefusedWithOne(t *testing.T) {
	for _, key := range [][]byte{nil, []byte("correct horse battery staple")} {
		g := newTestGroupWith(t, 2, func(_ int, c *Config) { c.AuthKey = key })
		ctx := ctxT(t)
		// the attacker: a Store client
		secret, err := rendezvous.FetchSecret(ctx, g.store)
		require.NoError(t, err)
		addr, err := rendezvous.FetchAddr(ctx, g.store, 0)
		require.NoError(t, err)
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err1 := clientHandshake(c, "g", 1, 0, secret, 0)
		c.Close()
		if key == nil {
			require.NoError(t, err1, "without a key, the Store's secret is enough")
			continue
		}
		// claiming to have a key is no help: it cannot compute the MACs
		c, err = net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err2 := clientHandshake(c, "g", 1, 0, secret, flagHasKey)
		c.Close()
		require.ErrorContains(t, err1, "this rank has no auth key", "with a key, the Store's secret alone is refused")
		require.ErrorIs(t, err2, errAuth)
		require.Empty(t, g.meshes[0].Connected(), "no stranger became a pair")
		// the real ranks still connect
		var d Desc
		require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, []byte{9}))
		b := make([]byte, 1)
		_, err = g.meshes[0].Recv(ctx, 1, Key{Kind: Coll, Seq: 1}, b, &d)
		require.NoError(t, err)
	}
}

func TestReadAuthKey(t *testing.T) {
	files := map[string]string{"k": "s3cret\n", "crlf": "s3cret\r\n", "empty": "\n"}
	read := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, &net.AddrError{Err: "no such file", Addr: p}
	}
	k, err := readAuthKey("", "", read)
	require.NoError(t, err)
	require.Nil(t, k)
	k, err = readAuthKey("abc", "", read)
	require.NoError(t, err)
	require.Equal(t, "abc", string(k))
	for _, f := range []string{"k", "crlf"} {
		k, err = readAuthKey("", f, read)
		require.NoError(t, err)
		require.Equal(t, "s3cret", string(k))
	}
	_, err = readAuthKey("", "empty", read)
	require.ErrorContains(t, err, "empty")
	_, err = readAuthKey("abc", "k", read)
	require.ErrorContains(t, err, "set one")
	_, err = readAuthKey("", "missing", read)
	require.ErrorContains(t, err, "missing")
}

// Ranks set up differently (one has a key, or encrypts, the other not) fail
// at their first message with a clear error on the dialing side at once,
// and on the other within its op's timeout; the key never appears.
func TestSetupMismatchIsClearOnBothSides(t *testing.T) {
	key := []byte("the key itself must never be printed")
	for _, tc := range []struct {
		name             string
		set              func(rank int, c *Config)
		dialer, listener string
	}{
		{"listener has no key", func(r int, c *Config) {
			if r == 1 {
				c.AuthKey = key
			}
		}, "peer has no auth key", "this rank has no auth key"},
		{"dialer has no key", func(r int, c *Config) {
			if r == 0 {
				c.AuthKey = key
			}
		}, "this rank has no auth key", "peer has no auth key"},
		{"only one encrypts", func(r int, c *Config) { c.Encrypt = r == 1 }, "peer does not encrypt", "this rank does not encrypt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGroupWith(t, 2, tc.set)
			var d Desc
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			err := g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, []byte{1})
			require.ErrorContains(t, err, tc.dialer)
			require.Less(t, time.Since(start), time.Second, "the dialer fails at once")
			// the listener's side: a send to rank 1 waits for its
			// connection, and its timeout says why none came
			err = g.meshes[0].Send(ctx, 1, Key{Kind: Coll, Seq: 2}, &d, []byte{1})
			require.ErrorContains(t, err, tc.listener)
			require.Contains(t, g.meshes[0].Refusals(), tc.listener)
			for _, msg := range []string{err.Error(), g.meshes[0].Refusals()} {
				require.NotContains(t, msg, string(key))
			}
		})
	}
}

// Encrypted pairs carry messages of every size bit for bit, both ways, and
// what crosses the wire is not the plaintext.
func TestEncryptedMessages(t *testing.T) {
	g := newTestGroupWith(t, 2, func(_ int, c *Config) { c.Encrypt = true; c.AuthKey = []byte("k") })
	ctx := ctxT(t)
	var d Desc
	for i, n := range []int{0, 1, 1000, maxRecord - 1, maxRecord, maxRecord + 1, 3*maxRecord + 17} {
		payload := make([]byte, n)
		for j := range payload {
			payload[j] = byte(j*7 + i)
		}
		for _, dir := range [][2]int{{1, 0}, {0, 1}} {
			k := Key{Kind: Coll, Seq: uint64(10*i + dir[0] + 1)}
			errc := make(chan error, 1)
			go func() { errc <- g.meshes[dir[0]].Send(ctx, dir[1], k, &d, payload[:n/2], payload[n/2:]) }()
			got := make([]byte, n)
			_, err := g.meshes[dir[1]].Recv(ctx, dir[0], k, got, &d)
			require.NoError(t, err)
			require.NoError(t, <-errc)
			require.True(t, bytes.Equal(got, payload), "%d bytes %v", n, dir)
		}
	}
	require.True(t, g.meshes[0].Encrypts())
}

// A byte changed on the wire of an encrypted pair never reaches a buffer:
// the receiver loses the connection, naming the peer.
func TestTamperedEncryptedFrameIsCaught(t *testing.T) {
	g := newTestGroupWith(t, 2, func(r int, c *Config) { c.Encrypt = true })
	ctx := ctxT(t)
	// rank 1 dials rank 0 through the proxy, which flips a byte after the
	// handshake (a hello of 37 bytes, a MAC of 32)
	proxy := conntest.TamperProxy(t, g.eps[0].Addr(), 37+1+32+200)
	require.NoError(t, rendezvous.PublishAddr(g.store, 0, proxy))
	var d Desc
	payload := bytes.Repeat([]byte{0x55}, 1<<20)
	errc := make(chan error, 1)
	go func() { errc <- g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, payload) }()
	got := make([]byte, len(payload))
	_, err := g.meshes[0].Recv(ctx, 1, Key{Kind: Coll, Seq: 1}, got, &d)
	require.Error(t, err)
	var pe *PeerError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, 1, pe.Rank)
	require.ErrorContains(t, err, "failed authentication")
	<-errc
}

// bufConn is a net.Conn over an in-memory stream: writes append, reads
// consume.
type bufConn struct {
	net.Conn
	bytes.Buffer
}

func (c *bufConn) Read(p []byte) (int, error)  { return c.Buffer.Read(p) }
func (c *bufConn) Write(p []byte) (int, error) { return c.Buffer.Write(p) }

// BenchmarkSeal is what sealing and opening a 4 MiB message cost on one
// core, without a socket: the CPU that encryption adds per byte (RESULTS.md
// section i).
func BenchmarkSeal(b *testing.B) {
	s := &session{key: make([]byte, 32), h: &hello{}, nonceS: make([]byte, nonceLen)}
	msg := make([]byte, 4<<20)
	b.Run("seal", func(b *testing.B) {
		var sink bufConn
		w, err := seal(&sink, s, true)
		require.NoError(b, err)
		b.SetBytes(int64(len(msg)))
		for range b.N {
			sink.Reset()
			if _, err := w.Write(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open", func(b *testing.B) {
		var wire bufConn
		w, err := seal(&wire, s, true)
		require.NoError(b, err)
		_, err = w.Write(msg)
		require.NoError(b, err)
		sealed := bytes.Clone(wire.Bytes())
		out := make([]byte, len(msg))
		b.SetBytes(int64(len(msg)))
		for range b.N {
			b.StopTimer()
			var in bufConn
			in.Write(sealed)
			r, err := seal(&in, s, false) // a fresh reader: record numbers from 0
			require.NoError(b, err)
			b.StartTimer()
			if _, err := io.ReadFull(r, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
