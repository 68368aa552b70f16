package transport

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/zlog"
)

// A scan's refusals: the first few logged, the rest counted once per
// interval, and logging resumes in the next interval.
func TestRefusalLogLimitsAScan(t *testing.T) {
	now := time.Unix(1000, 0)
	var lines []string
	var fire func()
	r := newRefusalLog()
	r.now = func() time.Time { return now }
	r.after = func(d time.Duration, f func()) *time.Timer {
		require.Equal(t, refusalInterval, d)
		fire = f
		return time.NewTimer(time.Hour)
	}
	r.emit = func(_ *zlog.Logger, msg string) { lines = append(lines, msg) }
	for i := range 1000 {
		r.warn(zlog.Process, "refused a connection from stranger %d", i)
	}
	require.Len(t, lines, refusalBurst)
	require.Equal(t, "refused a connection from stranger 0", lines[0])
	require.NotNil(t, fire, "the count is reported when the interval ends")
	fire()
	require.Len(t, lines, refusalBurst+1)
	require.Equal(t, fmt.Sprintf("refused %d more connections in the last %v without logging each (the last: refused a connection from stranger 999)", 1000-refusalBurst, refusalInterval), lines[refusalBurst])
	fire() // nothing new: nothing logged
	require.Len(t, lines, refusalBurst+1)

	now = now.Add(refusalInterval)
	r.warn(zlog.Process, "a later one")
	require.Equal(t, "a later one", lines[len(lines)-1], "a new interval logs again")
}

// The endpoint's refusals go through the limit: a burst of garbage
// connections leaves a bounded log, and the listener still serves.
func TestEndpointRefusalsAreLimited(t *testing.T) {
	ep, err := Listen("127.0.0.1")
	require.NoError(t, err)
	defer ep.Close()
	var mu sync.Mutex
	count := 0
	ep.refusals.emit = func(*zlog.Logger, string) { mu.Lock(); count++; mu.Unlock() }
	for range 200 {
		c, err := net.Dial("tcp", ep.Addr())
		require.NoError(t, err)
		c.Write([]byte("garbage garbage garbage garbage garbage garbage"))
		c.Close()
	}
	require.Eventually(t, func() bool {
		ep.refusals.mu.Lock()
		defer ep.refusals.mu.Unlock()
		return ep.refusals.logged+ep.refusals.suppressed == 200
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, refusalBurst, count)
}
