// Package zlog is zipccl's logger: ZIPCCL_DEBUG=WARN|INFO|TRACE selects the
// level (default WARN), and every line goes to stderr prefixed like NCCL's,
// "host:pid [rank] zipccl LEVEL message", so interleaved output of several
// ranks stays readable.
package zlog

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/zipccl/zipccl/backend/cenv" // before init reads ZIPCCL_DEBUG and RANK
)

// Level orders verbosity; a message is printed when its level <= the
// configured one.
type Level int32

// The levels, in NCCL_DEBUG's vocabulary.
const (
	Off Level = iota
	Warn
	Info
	Trace
)

func (l Level) String() string {
	switch l {
	case Warn:
		return "WARN"
	case Info:
		return "INFO"
	case Trace:
		return "TRACE"
	}
	return "OFF"
}

// ParseLevel reads a ZIPCCL_DEBUG value; unknown values mean WARN.
func ParseLevel(s string) Level {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "WARN", "WARNING":
		return Warn
	case "OFF", "NONE", "0":
		return Off
	case "INFO":
		return Info
	case "TRACE", "DEBUG":
		return Trace
	}
	return Warn
}

var (
	level  atomic.Int32
	prefix string
	mu     sync.Mutex // one line at a time
	out    = os.Stderr
)

func init() {
	level.Store(int32(ParseLevel(os.Getenv("ZIPCCL_DEBUG"))))
	host, _ := os.Hostname()
	prefix = fmt.Sprintf("%s:%d", host, os.Getpid())
}

// SetLevel overrides ZIPCCL_DEBUG (tests use it).
func SetLevel(l Level) { level.Store(int32(l)) }

// Enabled reports whether messages at l are printed; use it to skip building
// expensive messages.
func Enabled(l Level) bool { return Level(level.Load()) >= l && l > Off }

// Logger prefixes messages with a rank and an optional group name.
type Logger struct {
	tag string
}

// New returns a logger for one rank of one group. rank < 0 means unknown.
func New(rank int, group string) *Logger {
	r := "?"
	if rank >= 0 {
		r = fmt.Sprint(rank)
	}
	if group != "" {
		return &Logger{tag: fmt.Sprintf("[%s] group %s:", r, group)}
	}
	return &Logger{tag: fmt.Sprintf("[%s]", r)}
}

// Process is the logger for messages that belong to no group; its rank is
// RANK from the environment when torchrun set it.
var Process = New(envRank(), "")

func envRank() int {
	var r int
	if _, err := fmt.Sscan(os.Getenv("RANK"), &r); err != nil {
		return -1
	}
	return r
}

func (lg *Logger) log(l Level, format string, args []any) {
	if !Enabled(l) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	ts := time.Now().Format("15:04:05.000")
	mu.Lock()
	fmt.Fprintf(out, "%s %s %s zipccl %s %s\n", ts, prefix, lg.tag, l, msg)
	mu.Unlock()
}

// Warnf logs at WARN.
func (lg *Logger) Warnf(format string, args ...any) { lg.log(Warn, format, args) }

// Infof logs at INFO.
func (lg *Logger) Infof(format string, args ...any) { lg.log(Info, format, args) }

// Tracef logs at TRACE.
func (lg *Logger) Tracef(format string, args ...any) { lg.log(Trace, format, args) }
