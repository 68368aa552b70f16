package transport

import (
	"fmt"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/zlog"
)

// A scan of the listening port (40,000 garbage connections in a test)
// must not bury the job's log: each interval the first refusals are
// logged as they come, then the rest are counted and reported once when
// the interval ends.
const (
	refusalBurst    = 5
	refusalInterval = 10 * time.Second
)

// refusalLog rate-limits the WARNs of refused connections, per endpoint.
type refusalLog struct {
	mu         sync.Mutex
	start      time.Time // of the current interval
	logged     int
	suppressed int
	last       string // the last suppressed refusal, for the summary
	lastLog    *zlog.Logger
	flush      *time.Timer // reports the count at the interval's end
	// the clock, the timer and the log, replaced by tests
	now   func() time.Time
	after func(time.Duration, func()) *time.Timer
	emit  func(lg *zlog.Logger, msg string)
}

func newRefusalLog() *refusalLog {
	return &refusalLog{now: time.Now, after: time.AfterFunc, emit: func(lg *zlog.Logger, msg string) { lg.Warnf("%s", msg) }}
}

// warn logs a refusal on lg, or counts it when this interval's burst is
// spent.
func (r *refusalLog) warn(lg *zlog.Logger, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.start) >= refusalInterval {
		r.start, r.logged = now, 0
	}
	if r.logged < refusalBurst {
		r.logged++
		r.emit(lg, msg)
		return
	}
	r.suppressed++
	r.last, r.lastLog = msg, lg
	if r.flush == nil {
		r.flush = r.after(r.start.Add(refusalInterval).Sub(r.now()), r.report)
	}
}

// report logs how many refusals went unlogged since the last report.
func (r *refusalLog) report() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flush = nil
	if r.suppressed == 0 {
		return
	}
	r.emit(r.lastLog, fmt.Sprintf("refused %d more connections in the last %v without logging each (the last: %s)", r.suppressed, refusalInterval, r.last))
	r.suppressed = 0
}
