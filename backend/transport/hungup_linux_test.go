package transport

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// hungUp must not take a signal for a hang-up: poll returns EINTR when one
// arrives (the Go runtime preempts goroutines with SIGURG, often on a busy
// machine), and a healthy connection was then cut as if its peer had hung
// up while the message was read (seen in FSDP2 runs of 4 ranks on 2 cores).
func TestHungUpIgnoresSignals(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() { // a storm of SIGURG, which the runtime ignores but which interrupts poll
		defer close(done)
		for !stop.Load() {
			syscall.Kill(os.Getpid(), syscall.SIGURG)
		}
	}()
	falsePositives := 0
	for range 200000 {
		if hungUp(c) {
			falsePositives++
		}
	}
	stop.Store(true)
	<-done
	require.Zero(t, falsePositives, "a healthy connection reported hung up")
	s.Close()
	require.Eventually(t, func() bool { return hungUp(c) }, 5e9, 1e6, "a closed peer is seen")
}
