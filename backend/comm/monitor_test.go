package comm

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/opkind"
)

// monitoredEvery runs MonitoredBarrier on the ranks in who at once.
func monitoredEvery(r *rig, who []int, timeout time.Duration, waitAll bool) map[int]error {
	var mu sync.Mutex
	errs := map[int]error{}
	var wg sync.WaitGroup
	for _, rank := range who {
		wg.Go(func() {
			err := r.comms[rank].MonitoredBarrier(timeout, waitAll)
			mu.Lock()
			errs[rank] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

func TestMonitoredBarrier(t *testing.T) {
	const n = 4
	r := newRig(t, n, 20*time.Second)
	for rank, err := range monitoredEvery(r, []int{0, 1, 2, 3}, 5*time.Second, false) {
		require.NoError(t, err, "rank %d", rank)
	}
	for rank, err := range monitoredEvery(r, []int{0, 1, 2, 3}, 5*time.Second, true) {
		require.NoError(t, err, "rank %d", rank)
	}

	// Rank 1 stays away: rank 0 names it when the timeout is up, and the
	// ranks that came, before and after it in rank order, fail at once.
	start := time.Now()
	errs := monitoredEvery(r, []int{0, 2, 3}, 300*time.Millisecond, false)
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorContains(t, errs[0], "Rank 1 failed to pass monitoredBarrier in 300 ms")
	for _, rank := range []int{2, 3} {
		require.ErrorContains(t, errs[rank], fmt.Sprintf("Rank %d successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0", rank))
		require.ErrorContains(t, errs[rank], "Rank 1 failed", "rank 0's reason travels")
	}
}

func TestMonitoredBarrierWaitAllAndZeroTimeout(t *testing.T) {
	r := newRig(t, 3, 20*time.Second)
	errs := monitoredEvery(r, []int{0}, 200*time.Millisecond, true)
	require.ErrorContains(t, errs[0], "Ranks 1, 2 failed to pass monitoredBarrier in 200 ms")
	errs = monitoredEvery(r, []int{0}, 0, false)
	require.ErrorContains(t, errs[0], "Rank 0 timed out in monitoredBarrier")
	// the group's collectives are unaffected
	for _, res := range r.everyRank(func(int) *Op { return &Op{Kind: opkind.Barrier} }) {
		require.NoError(t, res.err)
	}
}
