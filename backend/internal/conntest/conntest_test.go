package conntest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// varConn is collective.VarConn, restated so this package's tests need not
// import collective.
type varConn interface {
	Rank() int
	Size() int
	Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error
	Recv(ctx context.Context, peer int, slot uint32, buf []byte) error
	RecvUpTo(ctx context.Context, peer int, slot uint32, buf []byte) (int, error)
}

var (
	_ varConn = (*Conn)(nil)
	_ varConn = (*TCPConn)(nil)
)

// exercise sends two messages each way between ranks 0 and 1 and checks
// exact, bounded and too-short receives.
func exercise(t *testing.T, a, b varConn) {
	t.Helper()
	ctx := context.Background()
	if err := a.Send(ctx, 1, 7, []byte("hel"), nil, []byte("lo")); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, 1, 8, []byte("bounded")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if err := b.Recv(ctx, 0, 7, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("Recv: %q, %v", buf, err)
	}
	big := make([]byte, 100)
	n, err := b.RecvUpTo(ctx, 0, 8, big)
	if err != nil || string(big[:n]) != "bounded" {
		t.Fatalf("RecvUpTo: %q, %v", big[:n], err)
	}
	// posted before the send
	done := make(chan error, 1)
	got := make([]byte, 3)
	go func() { done <- a.Recv(ctx, 1, 9, got) }()
	time.Sleep(time.Millisecond)
	if err := b.Send(ctx, 0, 9, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || string(got) != "abc" {
		t.Fatalf("posted Recv: %q, %v", got, err)
	}
	// a message longer than a bounded receive is an error
	if err := a.Send(ctx, 1, 10, []byte("toolong")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RecvUpTo(ctx, 0, 10, make([]byte, 3)); err == nil {
		t.Fatal("RecvUpTo accepted a longer message")
	}
}

func TestWorld(t *testing.T) {
	w := NewWorld(2)
	cs := w.Conns()
	exercise(t, cs[0], cs[1])
	var me *MismatchError
	if err := cs[0].Send(context.Background(), 1, 11, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Recv(context.Background(), 0, 11, make([]byte, 2)); !errors.As(err, &me) || !me.PairLocal() {
		t.Fatalf("length mismatch: %v", err)
	}
	if w.TotalSent() != 5+7+3+7+1 || w.Messages() != 5 {
		t.Fatalf("counted %d bytes, %d messages", w.TotalSent(), w.Messages())
	}
	if err := w.Leftovers(); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Send(context.Background(), 1, 11, nil); err == nil {
		t.Fatal("reused slot accepted")
	}
}

func TestWorldHooks(t *testing.T) {
	w := NewWorld(2)
	w.Corrupt = func(src, dst int, slot uint32, msg []byte) []byte { msg[0] ^= 1; return msg }
	cs := w.Conns()
	ctx := context.Background()
	cs[0].Send(ctx, 1, 1, []byte{2})
	b := make([]byte, 1)
	if err := cs[1].Recv(ctx, 0, 1, b); err != nil || b[0] != 3 {
		t.Fatalf("corrupt: %v %v", b, err)
	}

	w = NewWorld(3)
	boom := errors.New("boom")
	w.Fail = func(src, dst int, slot uint32, send bool) error {
		if src == 0 && send {
			return boom
		}
		return nil
	}
	cs = w.Conns()
	done := make(chan error, 1)
	go func() { done <- cs[2].Recv(ctx, 1, 1, b) }()
	if err := cs[0].Send(ctx, 1, 1, b); !errors.Is(err, boom) {
		t.Fatalf("Fail: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrAborted) {
		t.Fatalf("abort: %v", err)
	}

	w = NewWorld(2)
	w.Rendezvous = true
	cs = w.Conns()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := cs[0].Send(sctx, 1, 1, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rendezvous send without a receive: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := cs[1].Recv(ctx, 0, 2, b); err != nil {
			t.Error(err)
		}
	})
	if err := cs[0].Send(ctx, 1, 2, []byte{9}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

func TestTCPMesh(t *testing.T) {
	m, err := NewTCPMesh(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	exercise(t, m.Conn(0, 1), m.Conn(1, 1))
	// a large message, posted late (buffered) and early (direct)
	big := bytes.Repeat([]byte{1, 2, 3}, 1<<20)
	got := make([]byte, len(big))
	ctx := context.Background()
	if err := m.Conn(2, 1).Send(ctx, 0, 1, big); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := m.Conn(0, 1).Recv(ctx, 2, 1, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("buffered large message: %v", err)
	}
	if m.Unexpected() == 0 || m.SentBytes() == 0 {
		t.Fatal("counters not updated")
	}
}
