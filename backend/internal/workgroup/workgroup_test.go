package workgroup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type pairErr struct{}

func (pairErr) Error() string   { return "pair" }
func (pairErr) PairLocal() bool { return true }

// The first error cancels the group, except a pair-local one in an
// independent group; Wait returns it after every goroutine has exited.
func TestGroupCancel(t *testing.T) {
	for _, tc := range []struct {
		independent bool
		err         error
		cancelled   bool
	}{
		{false, errors.New("x"), true},
		{false, pairErr{}, true},
		{true, errors.New("x"), true},
		{true, pairErr{}, false},
	} {
		g, ctx := New(context.Background(), "test")
		if tc.independent {
			g, ctx = NewIndependent(context.Background(), "test")
		}
		g.Go(func() error { return tc.err })
		var cancelled bool
		g.Go(func() error {
			select {
			case <-ctx.Done():
				cancelled = true
			case <-time.After(200 * time.Millisecond):
			}
			return nil
		})
		if err := g.Wait(); err != tc.err {
			t.Fatalf("%+v: Wait returned %v", tc, err)
		}
		if cancelled != tc.cancelled {
			t.Fatalf("%+v: cancelled = %v", tc, cancelled)
		}
	}
}

func TestGroupPanic(t *testing.T) {
	g, _ := New(context.Background(), "pkg")
	g.Go(func() error { panic("boom") })
	if err := g.Wait(); err == nil || !strings.HasPrefix(err.Error(), "pkg: panic: boom") {
		t.Fatalf("got %v", err)
	}
}

// RecvAhead hands messages over in sequence order whatever the width.
func TestRecvAheadOrder(t *testing.T) {
	for _, w := range []int{0, 1, 3, 20} {
		g, ctx := New(context.Background(), "test")
		const count = 10
		win := RecvAhead(g, ctx, w, count, func(i int) (int, error) { return i * i, nil })
		for i := range count {
			v, err := win.Next(ctx, i)
			if err != nil || v != i*i {
				t.Fatalf("w=%d: message %d = %d, %v", w, i, v, err)
			}
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}
