package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/rendezvous"
)

// group starts n meshes, each on its own endpoint as if in its own
// process, sharing one store.
type testGroup struct {
	meshes []*Mesh
	eps    []*Endpoint
	store  *rendezvous.MemStore
	lost   chan [2]int // (reporter, lost peer)
}

func newTestGroup(t *testing.T, n int) *testGroup {
	return newTestGroupWith(t, n, func(int, *Config) {})
}

// newTestGroupWith is newTestGroup with each rank's Config adjusted by set.
func newTestGroupWith(t *testing.T, n int, set func(rank int, cfg *Config)) *testGroup {
	t.Helper()
	g := &testGroup{store: rendezvous.NewMemStore(), lost: make(chan [2]int, 64)}
	_, err := rendezvous.PublishSecret(g.store)
	require.NoError(t, err)
	for r := 0; r < n; r++ {
		ep, err := Listen("127.0.0.1")
		require.NoError(t, err)
		cfg := Config{
			Name: "g", Rank: r, Size: n,
			Secret:      func(ctx context.Context) ([]byte, error) { return rendezvous.FetchSecret(ctx, g.store) },
			PeerAddr:    func(ctx context.Context, p int) (string, error) { return rendezvous.FetchAddr(ctx, g.store, p) },
			OnPeerLost:  func(p int, err error) { g.lost <- [2]int{r, p} },
			DialTimeout: func() time.Duration { return 10 * time.Second },
		}
		set(r, &cfg)
		m, err := NewMesh(ep, cfg)
		require.NoError(t, err)
		require.NoError(t, rendezvous.PublishAddr(g.store, r, ep.Addr()))
		g.meshes = append(g.meshes, m)
		g.eps = append(g.eps, ep)
	}
	t.Cleanup(func() {
		for i, m := range g.meshes {
			m.Close()
			g.eps[i].Close()
		}
	})
	return g
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLazyConnectAndMessages(t *testing.T) {
	g := newTestGroup(t, 3)
	for _, m := range g.meshes {
		require.Empty(t, m.Connected(), "no connection before first use")
	}
	ctx := ctxT(t)
	var d Desc
	d[0] = 7
	payload := bytes.Repeat([]byte("zipccl"), 1000)
	k := Key{Kind: Coll, Seq: 1, Slot: 3}
	// Lower rank sends to a higher one: the higher rank must dial.
	errc := make(chan error, 1)
	go func() { errc <- g.meshes[0].Send(ctx, 2, k, &d, payload[:10], payload[10:]) }()
	buf := make([]byte, len(payload))
	src, err := g.meshes[2].Recv(ctx, 0, k, buf, &d)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.Equal(t, 0, src)
	require.Equal(t, payload, buf)
	require.Equal(t, []int{2}, g.meshes[0].Connected())
	require.Empty(t, g.meshes[1].Connected(), "rank 1 was never used")
}

func TestUnexpectedMessageIsBuffered(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	for i := 0; i < 5; i++ {
		require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: P2P, Seq: 9}, &d, []byte{byte(i)}))
	}
	// P2P messages with one tag are received in send order.
	for i := 0; i < 5; i++ {
		b := make([]byte, 1)
		_, err := g.meshes[0].Recv(ctx, 1, Key{Kind: P2P, Seq: 9}, b, &d)
		require.NoError(t, err)
		require.Equal(t, byte(i), b[0])
	}
}

func TestMismatchedDescAndLength(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var a, b Desc
	a[0], b[0] = 1, 2
	k := Key{Kind: Coll, Seq: 4}
	go g.meshes[0].Send(ctx, 1, k, &a, make([]byte, 8))
	_, err := g.meshes[1].Recv(ctx, 0, k, make([]byte, 8), &b)
	var me *MismatchError
	require.ErrorAs(t, err, &me)
	require.Equal(t, a, me.Got)

	k2 := Key{Kind: Coll, Seq: 5}
	go g.meshes[0].Send(ctx, 1, k2, &a, make([]byte, 16))
	_, err = g.meshes[1].Recv(ctx, 0, k2, make([]byte, 8), &a)
	require.ErrorAs(t, err, &me)
	require.EqualValues(t, 16, me.GotLen)

	// The connection survives a mismatch.
	k3 := Key{Kind: Coll, Seq: 6}
	go g.meshes[0].Send(ctx, 1, k3, &a, []byte{42})
	got := make([]byte, 1)
	_, err = g.meshes[1].Recv(ctx, 0, k3, got, &a)
	require.NoError(t, err)
	require.Equal(t, byte(42), got[0])
}

func TestAnySource(t *testing.T) {
	g := newTestGroup(t, 4)
	ctx := ctxT(t)
	var d Desc
	// Rank 2 receives from any rank; the sender is a lower rank, which
	// waits for rank 2 to dial it.
	go g.meshes[1].Send(ctx, 2, Key{Kind: P2P, Seq: 1}, &d, []byte{1, 2, 3})
	g.meshes[2].Connect()
	buf := make([]byte, 3)
	src, err := g.meshes[2].Recv(ctx, -1, Key{Kind: P2P, Seq: 1}, buf, &d)
	require.NoError(t, err)
	require.Equal(t, 1, src)
	require.Equal(t, []byte{1, 2, 3}, buf)
}

func TestStaleCollectiveMessagesAreDropped(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	// The higher rank sends, so it dials and nothing waits for rank 0.
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, []byte{1}))
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 2}, &d, []byte{2}))
	b := make([]byte, 1)
	// Wait until both are buffered, then declare seq 1 stale.
	require.Eventually(t, func() bool {
		g.meshes[0].mu.Lock()
		defer g.meshes[0].mu.Unlock()
		return len(g.meshes[0].unexp) == 2
	}, 5*time.Second, time.Millisecond)
	g.meshes[0].SetCollFloor(2)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := g.meshes[0].Recv(short, 1, Key{Kind: Coll, Seq: 1}, b, &d)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = g.meshes[0].Recv(ctx, 1, Key{Kind: Coll, Seq: 2}, b, &d)
	require.NoError(t, err)
	require.Equal(t, byte(2), b[0])
}

func TestCancelledRecvReleasesBuffer(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var d Desc
	_, err := g.meshes[0].Recv(ctx, 1, Key{Kind: Coll, Seq: 1}, make([]byte, 4), &d)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	g.meshes[0].mu.Lock()
	defer g.meshes[0].mu.Unlock()
	require.Empty(t, g.meshes[0].posted, "a cancelled receive must be withdrawn")
}

func TestPeerLossFailsPendingAndIsReported(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, []byte{1}))
	// Simulate a crash of rank 1: its sockets close with no goodbye.
	g.meshes[1].Abort(errors.New("crash"))
	_, err := g.meshes[0].Recv(ctx, 1, Key{Kind: Coll, Seq: 2}, make([]byte, 1), &d)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 1, pe.Rank)
	select {
	case ev := <-g.lost:
		require.Equal(t, [2]int{0, 1}, ev)
	case <-time.After(5 * time.Second):
		t.Fatal("loss of rank 1 not reported")
	}
}

func TestCleanCloseIsNotALoss(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, []byte{5}))
	g.meshes[1].Close()
	// The message sent before the goodbye is still delivered.
	b := make([]byte, 1)
	_, err := g.meshes[0].Recv(ctx, 1, Key{Kind: Coll, Seq: 1}, b, &d)
	require.NoError(t, err)
	require.Equal(t, byte(5), b[0])
	select {
	case ev := <-g.lost:
		t.Fatalf("clean close reported as loss: %v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// A stranger without the secret is refused and the group keeps working.
func TestStrangerIsRefused(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	addr := g.eps[0].Addr()

	// 1. Garbage.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	c.Write(bytes.Repeat([]byte("GET / HTTP/1.0\r\n"), 4))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "listener must close the connection")
	c.Close()

	// 2. A well-formed hello with a wrong secret.
	c, err = net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = clientHandshake(c, "g", 1, 0, bytes.Repeat([]byte{1}, rendezvous.SecretLen), 0)
	require.ErrorIs(t, err, errAuth, "the server's proof must not verify with a wrong secret")
	c.Close()

	// 3. A stranger who skips the server check and sends a forged MAC.
	c, err = net.Dial("tcp", addr)
	require.NoError(t, err)
	hello := make([]byte, 37)
	binary.LittleEndian.PutUint32(hello[0:], helloMagic)
	binary.LittleEndian.PutUint16(hello[4:], protocolVersion)
	binary.LittleEndian.PutUint16(hello[6:], 1)
	binary.LittleEndian.PutUint32(hello[8:], 1)
	hello[36] = 'g'
	_, err = c.Write(hello)
	require.NoError(t, err)
	rep := make([]byte, 8+nonceLen+macLen)
	_, err = io.ReadFull(c, rep)
	require.NoError(t, err)
	c.Write(make([]byte, macLen))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := c.Read(make([]byte, 1))
	require.Zero(t, n, "no ack for a forged MAC")
	c.Close()

	require.Empty(t, g.meshes[0].Connected(), "no stranger became a pair")
	var d Desc
	go g.meshes[1].Send(ctx, 0, Key{Kind: P2P}, &d, []byte{9})
	b := make([]byte, 1)
	_, err = g.meshes[0].Recv(ctx, 1, Key{Kind: P2P}, b, &d)
	require.NoError(t, err)
	require.Equal(t, byte(9), b[0])
}

func TestManyConcurrentSendsKeepFramesIntact(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	const n = 64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, g.meshes[0].Send(ctx, 1, Key{Kind: Coll, Seq: 1, Slot: uint32(i)}, &d, bytes.Repeat([]byte{byte(i)}, 70000)))
		}()
	}
	for i := n - 1; i >= 0; i-- {
		b := make([]byte, 70000)
		_, err := g.meshes[1].Recv(ctx, 0, Key{Kind: Coll, Seq: 1, Slot: uint32(i)}, b, &d)
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{byte(i)}, 70000), b)
	}
	wg.Wait()
}

func TestPostUpToAcceptsShorterMessages(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	buf := make([]byte, 100)
	// Posted before the message arrives: read straight into buf.
	pd := g.meshes[0].PostUpTo(1, Key{Kind: Coll, Seq: 1}, buf, &d)
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 1}, &d, []byte("short")))
	_, err := pd.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "short", string(buf[:pd.Len()]))
	// Buffered first, posted later.
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 2}, &d, []byte("later")))
	require.Eventually(t, func() bool {
		g.meshes[0].mu.Lock()
		defer g.meshes[0].mu.Unlock()
		return len(g.meshes[0].unexp) == 1
	}, 5*time.Second, time.Millisecond)
	pd = g.meshes[0].PostUpTo(1, Key{Kind: Coll, Seq: 2}, buf, &d)
	_, err = pd.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "later", string(buf[:pd.Len()]))
	// Longer than the buffer is a mismatch.
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: Coll, Seq: 3}, &d, make([]byte, 101)))
	_, err = g.meshes[0].PostUpTo(1, Key{Kind: Coll, Seq: 3}, buf, &d).Wait(ctx)
	var me *MismatchError
	require.ErrorAs(t, err, &me)
}

func TestPostAcceptChoosesBuffer(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var plain, coded Desc
	coded[3] = 1
	user := make([]byte, 8)
	scratch := make([]byte, 3)
	accept := func(d Desc, n uint64) ([]byte, error) {
		if d[3] == 1 {
			return scratch[:n], nil
		}
		return user, nil
	}
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: P2P, Seq: 1}, &plain, []byte("12345678")))
	pd := g.meshes[0].PostAccept(1, Key{Kind: P2P, Seq: 1}, accept)
	_, err := pd.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "12345678", string(user))
	require.Equal(t, plain, pd.Desc())

	pd = g.meshes[0].PostAccept(1, Key{Kind: P2P, Seq: 1}, accept)
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: P2P, Seq: 1}, &coded, []byte("abc")))
	_, err = pd.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "abc", string(pd.Buf()))
	require.Equal(t, coded, pd.Desc())

	// accept's error fails the receive; the connection survives.
	pd = g.meshes[0].PostAccept(1, Key{Kind: P2P, Seq: 2}, func(Desc, uint64) ([]byte, error) { return nil, errors.New("nope") })
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: P2P, Seq: 2}, &plain, []byte("x")))
	_, err = pd.Wait(ctx)
	require.ErrorContains(t, err, "nope")
	require.NoError(t, g.meshes[1].Send(ctx, 0, Key{Kind: P2P, Seq: 3}, &plain, []byte("y")))
	b := make([]byte, 1)
	_, err = g.meshes[0].Recv(ctx, 1, Key{Kind: P2P, Seq: 3}, b, &plain)
	require.NoError(t, err)
}

func TestIsLocalIP(t *testing.T) {
	require.True(t, isLocalIP(net.ParseIP("127.0.0.1")))
	require.True(t, isLocalIP(net.ParseIP("::1")))
	require.False(t, isLocalIP(net.ParseIP("192.0.2.1")), "TEST-NET-1 is nobody's address")
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			require.True(t, isLocalIP(n.IP), "%v is this namespace's own", n.IP)
		}
	}
}

// A large message whose receive is posted just after it arrives goes
// straight into the receive's buffer, not through a buffered copy.
func TestLargeMessageWaitsForItsReceive(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	payload := bytes.Repeat([]byte("0123456789abcdef"), awaitMin/4) // 4*awaitMin bytes: a wait of about 4 ms
	// connect first, so that the message's header arrives before the receive
	warm := Key{Kind: P2P, Seq: 99}
	go func() { _ = g.meshes[1].Send(ctx, 0, warm, &d, []byte{1}) }()
	_, err := g.meshes[0].Recv(ctx, 1, warm, make([]byte, 1), &d)
	require.NoError(t, err)
	direct := false
	for try := 0; try < 3 && !direct; try++ {
		k := Key{Kind: P2P, Seq: uint64(100 + try)}
		before := largeBuffered.Load()
		// allocated first: zeroing 16 MiB (under -race, with its shadow)
		// can take longer than the wait
		buf := make([]byte, len(payload))
		errc := make(chan error, 1)
		go func() { errc <- g.meshes[1].Send(ctx, 0, k, &d, payload) }()
		time.Sleep(time.Millisecond) // the frame's header is in; no receive yet
		_, err := g.meshes[0].Recv(ctx, 1, k, buf, &d)
		require.NoError(t, err)
		require.NoError(t, <-errc)
		require.Equal(t, payload, buf)
		direct = largeBuffered.Load() == before
	}
	require.True(t, direct, "every try buffered the message")
}

// A large message whose receive comes only after a later message's (on the
// same connection) is buffered once the wait is over: nothing deadlocks.
func TestLargeMessageReceivedLateIsBuffered(t *testing.T) {
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	big := bytes.Repeat([]byte{7}, 2*awaitMin)
	kBig, kSmall := Key{Kind: P2P, Seq: 1}, Key{Kind: P2P, Seq: 2}
	before := largeBuffered.Load()
	errc := make(chan error, 1)
	go func() {
		if err := g.meshes[1].Send(ctx, 0, kBig, &d, big); err != nil {
			errc <- err
			return
		}
		errc <- g.meshes[1].Send(ctx, 0, kSmall, &d, []byte{1})
	}()
	small := make([]byte, 1)
	_, err := g.meshes[0].Recv(ctx, 1, kSmall, small, &d)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.Equal(t, int64(1), largeBuffered.Load()-before)
	buf := make([]byte, len(big))
	_, err = g.meshes[0].Recv(ctx, 1, kBig, buf, &d)
	require.NoError(t, err)
	require.Equal(t, big, buf)
}
