package workq

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPollTimesOutWhenEmpty(t *testing.T) {
	q := New()
	start := time.Now()
	_, ok := q.Poll(20 * time.Millisecond)
	require.False(t, ok)
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
}

func TestFIFOAcrossProducers(t *testing.T) {
	q := New()
	const producers, each = 4, 1000
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				q.Push(Completion{Ticket: uint64(p*each + i), Source: int32(p)})
			}
		}()
	}
	last := map[int32]uint64{}
	seen := 0
	for seen < producers*each {
		c, ok := q.Poll(time.Second)
		require.True(t, ok, "completion lost after %d", seen)
		if prev, ok := last[c.Source]; ok {
			require.Greater(t, c.Ticket, prev, "producer %d reordered", c.Source)
		}
		last[c.Source] = c.Ticket
		seen++
	}
	wg.Wait()
	require.Equal(t, 0, q.Len())
}
