package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// connectCMA connects ranks a and b and waits until each reads the other's
// memory.
func connectCMA(t *testing.T, g *testGroup, a, b int) {
	t.Helper()
	ctx := ctxT(t)
	var d Desc
	k := Key{Kind: P2P, Seq: 1 << 40}
	go func() { _ = g.meshes[a].Send(ctx, b, k, &d, []byte{1}) }()
	_, err := g.meshes[b].Recv(ctx, a, k, make([]byte, 1), &d)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return g.meshes[a].peers[b].cmaOut.Load() && g.meshes[b].peers[a].cmaOut.Load()
	}, 5*time.Second, time.Millisecond, "the probe did not enable reads by descriptor")
}

// newCMAPair is a group of two ranks that read each other's memory.
func newCMAPair(t *testing.T) *testGroup {
	t.Helper()
	if !cmaEnabled() {
		t.Skip("process_vm_readv is not available here")
	}
	g := newTestGroup(t, 2)
	connectCMA(t, g, 0, 1)
	return g
}

// holdCMAReads makes every read by descriptor wait until release is closed.
func holdCMAReads(t *testing.T) (release chan struct{}) {
	release = make(chan struct{})
	hook := func() { <-release }
	cmaBeforeRead.Store(&hook)
	t.Cleanup(func() { cmaBeforeRead.Store(nil) })
	return release
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

func TestCMAMessagesBothWays(t *testing.T) {
	g := newCMAPair(t)
	ctx := ctxT(t)
	var d Desc
	before := cmaReads.Load()
	for i, size := range []int{cmaMin, 3<<20 + 5, 9 << 20} {
		payload := randBytes(size, uint64(i))
		k := Key{Kind: Coll, Seq: uint64(i)}
		errc := make(chan error, 2)
		// From 1 to 0 in three segments; from 0 to 1 in one.
		go func() { errc <- g.meshes[1].Send(ctx, 0, k, &d, payload[:7], payload[7:size/2], nil, payload[size/2:]) }()
		go func() { errc <- g.meshes[0].Send(ctx, 1, k, &d, payload) }()
		for _, r := range []int{0, 1} {
			buf := make([]byte, size)
			_, err := g.meshes[r].Recv(ctx, 1-r, k, buf, &d)
			require.NoError(t, err)
			require.True(t, bytes.Equal(payload, buf), "size %d to rank %d", size, r)
		}
		require.NoError(t, <-errc)
		require.NoError(t, <-errc)
	}
	require.EqualValues(t, 6, cmaReads.Load()-before)
	// Below cmaMin a message stays on the socket.
	go func() { _ = g.meshes[0].Send(ctx, 1, Key{Kind: P2P, Seq: 5}, &d, make([]byte, cmaMin-1)) }()
	_, err := g.meshes[1].Recv(ctx, 0, Key{Kind: P2P, Seq: 5}, make([]byte, cmaMin-1), &d)
	require.NoError(t, err)
	require.EqualValues(t, 6, cmaReads.Load()-before)
}

// A message read by descriptor and then refused (another op, a stale
// sequence number) is acknowledged all the same: its sender returns.
func TestCMARefusedMessagesAreAcknowledged(t *testing.T) {
	g := newCMAPair(t)
	ctx := ctxT(t)
	var a, b Desc
	a[0], b[0] = 1, 2
	k := Key{Kind: Coll, Seq: 4}
	errc := make(chan error, 1)
	go func() { errc <- g.meshes[0].Send(ctx, 1, k, &a, make([]byte, cmaMin)) }()
	_, err := g.meshes[1].Recv(ctx, 0, k, make([]byte, cmaMin), &b)
	var me *MismatchError
	require.ErrorAs(t, err, &me)
	require.NoError(t, <-errc)

	g.meshes[1].SetCollFloor(10)
	require.NoError(t, g.meshes[0].Send(ctx, 1, Key{Kind: Coll, Seq: 9}, &a, make([]byte, cmaMin)))
	// The connection still works, by descriptor.
	payload := randBytes(cmaMin, 3)
	go func() { errc <- g.meshes[0].Send(ctx, 1, Key{Kind: Coll, Seq: 11}, &a, payload) }()
	buf := make([]byte, cmaMin)
	_, err = g.meshes[1].Recv(ctx, 0, Key{Kind: Coll, Seq: 11}, buf, &a)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.Equal(t, payload, buf)
}

// A sender that gives up before its message was read cuts the connection,
// and the receiver fails the message instead of keeping what it read: the
// sender's memory may have been reused by then.
func TestCMACancelledSendFailsTheReceive(t *testing.T) {
	g := newCMAPair(t)
	release := holdCMAReads(t)

	var d Desc
	k := Key{Kind: P2P, Seq: 3}
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.meshes[0].Send(ctx, 1, k, &d, make([]byte, cmaMin)) }()
	recvErr := make(chan error, 1)
	go func() {
		_, err := g.meshes[1].Recv(ctxT(t), 0, k, make([]byte, cmaMin), &d)
		recvErr <- err
	}()
	time.Sleep(20 * time.Millisecond) // the receiver is in the read now
	stop := errors.New("op timed out")
	cancel(stop)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, stop)
	case <-time.After(cancelGrace + 5*time.Second):
		t.Fatal("the cancelled send did not return")
	}
	close(release)
	var pe *PeerError
	require.ErrorAs(t, <-recvErr, &pe)
}

// A sender whose peer dies before reading its message returns an error.
func TestCMAPeerLostBeforeAck(t *testing.T) {
	g := newCMAPair(t)
	release := holdCMAReads(t)
	defer close(release)
	var d Desc
	errc := make(chan error, 1)
	go func() { errc <- g.meshes[0].Send(ctxT(t), 1, Key{Kind: P2P, Seq: 3}, &d, make([]byte, cmaMin)) }()
	time.Sleep(20 * time.Millisecond)
	g.meshes[1].Abort(errors.New("killed"))
	var pe *PeerError
	select {
	case err := <-errc:
		require.ErrorAs(t, err, &pe)
		require.Equal(t, 1, pe.Rank)
	case <-time.After(10 * time.Second):
		t.Fatal("the send did not return")
	}
}

func TestCMADisabledByEnvironment(t *testing.T) {
	t.Setenv("ZIPCCL_CMA", "0")
	g := newTestGroup(t, 2)
	ctx := ctxT(t)
	var d Desc
	before := cmaReads.Load()
	for i := 0; i < 3; i++ {
		payload := randBytes(1<<20, uint64(i))
		k := Key{Kind: P2P, Seq: uint64(i)}
		go func() { _ = g.meshes[0].Send(ctx, 1, k, &d, payload) }()
		buf := make([]byte, len(payload))
		_, err := g.meshes[1].Recv(ctx, 0, k, buf, &d)
		require.NoError(t, err)
		require.Equal(t, payload, buf)
		time.Sleep(10 * time.Millisecond) // room for a (wrong) probe to land
	}
	require.Zero(t, cmaReads.Load()-before)
	require.False(t, g.meshes[0].peers[1].cmaOut.Load())
	require.False(t, g.meshes[1].peers[0].cmaOut.Load())
}

func TestCMAProbe(t *testing.T) {
	id, err := localCMA()
	if err != nil {
		t.Skip("process_vm_readv is not available here")
	}
	h := id.hello()
	pid, denied := probeCMA(h)
	require.Equal(t, int(id.pid), pid)
	require.NoError(t, denied)
	for name, mutate := range map[string]func(b []byte){
		"another network namespace": func(b []byte) { b[16] ^= 1 },
		"another token":             func(b []byte) { b[40] ^= 1 },
		"another address":           func(b []byte) { binary.LittleEndian.PutUint64(b[24:], 8) },
		"no process":                func(b []byte) { binary.LittleEndian.PutUint32(b[0:], 0) },
		"short":                     nil,
	} {
		b := append([]byte(nil), h...)
		if mutate == nil {
			b = b[:len(b)-1]
		} else {
			mutate(b)
		}
		pid, denied := probeCMA(b)
		require.Zero(t, pid, name)
		// only a peer of this namespace that cannot be read is worth a word
		require.Equal(t, name == "another token" || name == "another address", denied != nil, name)
	}
}

func TestCMADescriptorChecks(t *testing.T) {
	a, b := make([]byte, 10), make([]byte, 20)
	desc := encodeCMADesc(77, [][]byte{a, b})
	token, segs, err := readCMADesc(bytes.NewReader(desc), 30)
	require.NoError(t, err)
	require.EqualValues(t, 77, token)
	require.Len(t, segs, 2)
	require.EqualValues(t, 20, segs[1].n)

	_, _, err = readCMADesc(bytes.NewReader(desc), 31)
	require.ErrorIs(t, err, errBadFrame, "lengths that do not add up")
	bad := append([]byte(nil), desc...)
	binary.LittleEndian.PutUint32(bad[8:], cmaMaxSegs+1)
	_, _, err = readCMADesc(bytes.NewReader(bad), 30)
	require.ErrorIs(t, err, errBadFrame, "too many segments")
	binary.LittleEndian.PutUint32(bad[8:], 0)
	_, _, err = readCMADesc(bytes.NewReader(bad), 30)
	require.ErrorIs(t, err, errBadFrame, "no segment")
	_, _, err = readCMADesc(bytes.NewReader(desc[:20]), 30)
	require.Error(t, err, "truncated")

	var h header
	hb := make([]byte, headerLen)
	(&header{kind: frameBye, flags: flagCMA}).encode(hb)
	require.ErrorIs(t, h.decode(hb), errBadFrame, "flags on a control frame")
	(&header{kind: Coll, flags: 2}).encode(hb)
	require.ErrorIs(t, h.decode(hb), errBadFrame, "unknown flag")
}

// Memory the receiver cannot read (a driver's own mappings) makes the
// sender write the message on the socket: it still arrives, whether its
// receive was posted, posted later, or posted for any source.
func TestCMAUnreadableMemoryComesOnTheSocket(t *testing.T) {
	g := newCMAPair(t)
	fail := func() error { return syscall.EFAULT }
	cmaReadErr.Store(&fail)
	t.Cleanup(func() { cmaReadErr.Store(nil) })
	ctx := ctxT(t)
	var d Desc
	before := cmaReads.Load()
	for i, how := range []string{"posted", "late", "any source"} {
		payload := randBytes(cmaMin+8*i, uint64(10+i))
		k := Key{Kind: P2P, Seq: uint64(20 + i)}
		errc := make(chan error, 1)
		if how == "late" {
			require.NoError(t, g.meshes[0].Send(ctx, 1, k, &d, payload[:100], payload[100:]))
		} else {
			go func() { errc <- g.meshes[0].Send(ctx, 1, k, &d, payload[:100], payload[100:]) }()
		}
		peer := 0
		if how == "any source" {
			peer = -1
		}
		buf := make([]byte, len(payload))
		src, err := g.meshes[1].Recv(ctx, peer, k, buf, &d)
		require.NoError(t, err, how)
		require.Equal(t, 0, src, how)
		require.True(t, bytes.Equal(payload, buf), how)
		if how != "late" {
			require.NoError(t, <-errc, how)
		}
	}
	require.Zero(t, cmaReads.Load()-before)
	require.True(t, g.meshes[0].peers[1].cmaOut.Load(), "one unreadable buffer does not turn descriptors off")
}
