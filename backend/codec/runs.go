package codec

import (
	"sync"
	"sync/atomic"
)

// shareRuns runs work on the calling goroutine (caller true) and on
// threads-1 more. Each calls next for the index of the next of nruns runs
// until it reports none left, so the caller never waits on a goroutine to
// start: called from Python, an even split among new goroutines while the
// caller waited often ran no faster than one thread, and some calls several
// times slower, on a 2-vCPU guest (benchmarks/CODEC.md "Threads called
// from Python").
func shareRuns(threads, nruns int, work func(caller bool, next func() (int, bool))) {
	var n atomic.Int64
	next := func() (int, bool) {
		r := int(n.Add(1)) - 1
		return r, r < nruns
	}
	var wg sync.WaitGroup
	for range threads - 1 {
		wg.Go(func() { work(false, next) })
	}
	work(true, next)
	wg.Wait()
}
