// Package workq is the process-wide completion queue between the engine and
// the C++ shim: Go goroutines push outcomes, and the shim's completion
// threads pull them (through zc_poll; one at a time unless a callback blocks
// one) to complete torch Works and futures, so no torch callback ever runs
// on a Go thread. Poll is safe from several threads.
package workq

import (
	"sync"
	"time"
)

// Completion is one op's outcome.
type Completion struct {
	Ticket  uint64
	Status  int32 // 0 on success, else a comm.Code
	Source  int32 // recv: the rank the message came from
	Message string
}

// Queue is an unbounded FIFO of completions: pushing never blocks the
// engine.
type Queue struct {
	mu     sync.Mutex
	items  []Completion
	notify chan struct{} // holds a token while items may be non-empty
}

// New returns an empty queue.
func New() *Queue { return &Queue{notify: make(chan struct{}, 1)} }

// Push appends a completion.
func (q *Queue) Push(c Completion) {
	q.mu.Lock()
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Poll returns the oldest completion, waiting up to timeout for one.
func (q *Queue) Poll(timeout time.Duration) (Completion, bool) {
	var timer *time.Timer
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			c := q.items[0]
			q.items[0] = Completion{}
			q.items = q.items[1:]
			more := len(q.items) > 0
			q.mu.Unlock()
			if more {
				select {
				case q.notify <- struct{}{}:
				default:
				}
			}
			return c, true
		}
		q.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(timeout)
			defer timer.Stop()
		}
		select {
		case <-q.notify:
		case <-timer.C:
			return Completion{}, false
		}
	}
}

// Len is the number of completions waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}
