package switcher

import (
	"fmt"
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Feedback corrects the model with measured times. Training repeats the
// same calls (one bucket, one shard, one expert exchange per step), so the
// model's choice to code a call can be checked against the raw path on the
// next ones. The model does not see everything that costs time: the CPU
// that other ranks' TCP stacks take from the same cores, a link faster or
// slower than its probe said. Wherever it codes, Feedback times the raw
// path once, keeps whichever of the two was faster, and times the other
// again now and then, less often each time the answer stays the same.
//
// It never codes what the model left raw (so loopback and small calls are
// not touched), and only acts under Auto. Its state changes only through
// Commit and Record, so ranks that feed those the same agreed inputs in
// the same order take the same decisions. The zero value is ready to use;
// it is not safe for concurrent use.
type Feedback struct {
	calls map[Key]*history
}

// Key identifies the calls Feedback treats as repeats of one another.
type Key struct {
	Op    Op
	DType dtype.DType
	Bytes int
}

// KeyOf is the Key of a call.
func KeyOf(in Input) Key { return Key{Op: in.Op, DType: in.DType, Bytes: in.Bytes} }

const (
	// fbWarm coded calls run before the raw path is timed: the first
	// ones pay for buffers and caches.
	fbWarm = 2
	// The path not taken is timed again after fbFirst calls, then at
	// doubling intervals up to fbMaxEvery while the preference holds.
	fbFirst    = 32
	fbMaxEvery = 1024
	// fbSamples measured calls per path are kept; the fastest of them
	// stands for the path, so that one preempted call does not flip it.
	fbSamples = 4
	// fbMaxKeys bounds the table; past it the table starts over (every
	// rank at the same call, as the sequence is the same everywhere).
	fbMaxKeys = 1024
)

type history struct {
	calls              int // calls the model coded
	codedRuns, rawRuns int // calls run each way
	coded, raw         samples
	preferRaw          bool // the preference at the last re-timing
	next, every        int  // call of the next re-timing; the interval
}

type samples struct {
	v [fbSamples]float64
	n int // samples held, up to fbSamples
	i int // next slot
}

func (s *samples) add(sec float64) {
	s.v[s.i] = sec
	s.i = (s.i + 1) % fbSamples
	s.n = min(s.n+1, fbSamples)
}

// best is the fastest sample, +Inf when there is none.
func (s *samples) best() float64 {
	b := math.Inf(1)
	for _, v := range s.v[:s.n] {
		b = min(b, v)
	}
	return b
}

// Step is the change one decision makes to Feedback's state. Decide does
// not change the state; Commit applies the step once the call is agreed,
// so that a call the ranks disagreed on (each deciding on its own key)
// leaves every rank's state as it was.
type Step struct {
	ok  bool
	key Key
	h   history // its counters; the samples are Record's
}

// Decide is the package's Decide, with the model's coded choices checked
// against measured times. Pass the Step to Commit once the call is agreed.
func (f *Feedback) Decide(in Input, th Defaults) (Decision, Step) {
	d := Decide(in, th)
	if in.Mode != Auto || !d.Coded {
		return d, Step{}
	}
	k := KeyOf(in)
	var h history
	if p := f.calls[k]; p != nil {
		h = *p
	}
	h.calls++
	never := in
	never.Mode = Never
	raw := Decide(never, th) // same family, so the same result bits
	raw.PredRaw, raw.PredCoded = d.PredRaw, d.PredCoded
	c, r := h.coded.best(), h.raw.best()
	runRaw := false
	switch {
	case h.codedRuns < fbWarm:
	case h.rawRuns == 0:
		runRaw = true
		raw.Why = "feedback: timing the raw path once; " + d.Why
		h.next, h.every = h.calls+fbFirst, fbFirst
	case h.raw.n == 0 || h.coded.n == 0:
		// the first raw timing is on its way: keep the model's choice
	default:
		preferRaw := c > r
		if h.calls >= h.next {
			if preferRaw == h.preferRaw {
				h.every = min(2*h.every, fbMaxEvery)
			} else {
				h.every = fbFirst
			}
			h.preferRaw, h.next = preferRaw, h.calls+h.every
			runRaw = !preferRaw
			if runRaw {
				raw.Why = fmt.Sprintf("feedback: timing raw again (coded %.3gs <= raw %.3gs measured)", c, r)
			} else {
				d.Why = fmt.Sprintf("feedback: timing coded again (raw %.3gs < coded %.3gs measured)", r, c)
			}
		} else if preferRaw {
			runRaw = true
			raw.Why = fmt.Sprintf("measured: raw %.3gs < coded %.3gs; %s", r, c, d.Why)
		} else {
			d.Why = fmt.Sprintf("%s; measured coded %.3gs <= raw %.3gs", d.Why, c, r)
		}
	}
	if runRaw {
		h.rawRuns++
		d = raw
		d.Measured = true
	} else {
		h.codedRuns++
	}
	return d, Step{ok: true, key: k, h: h}
}

// Commit applies a Step returned by Decide.
func (f *Feedback) Commit(s Step) {
	if !s.ok {
		return
	}
	if f.calls == nil || len(f.calls) >= fbMaxKeys && f.calls[s.key] == nil {
		f.calls = map[Key]*history{}
	}
	h := f.calls[s.key]
	if h == nil {
		h = &history{}
		f.calls[s.key] = h
	}
	coded, raw := h.coded, h.raw
	*h = s.h
	h.coded, h.raw = coded, raw
}

// Record adds the measured seconds of one call of k, run coded or not (the
// group's agreed figure, the same on every rank). Calls the model never coded,
// and times that are not positive and finite, are ignored.
func (f *Feedback) Record(k Key, coded bool, sec float64) {
	h := f.calls[k]
	if h == nil || !(sec > 0) || math.IsInf(sec, 0) {
		return
	}
	if coded {
		h.coded.add(sec)
	} else {
		h.raw.add(sec)
	}
}
