package switcher

import (
	"fmt"
	"math"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Feedback corrects the model with measured times. Training repeats the
// same calls (one bucket, one shard, one expert exchange per step), so the
// model's choice to code a call can be checked on the next ones. The model
// does not see everything that costs time: the CPU that other ranks' TCP
// stacks take from the same cores, a link faster or slower than its probe
// said, a codec slowed on one rank while the group measured it. Wherever
// the model codes, Feedback times the raw path once, and the other codec
// once if the model would code with that one too. It then keeps the
// fastest of the paths, and times the others again now and then, less
// often each time the answer stays the same.
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
	// fbWarm calls run the model's choice before another path is timed:
	// the first ones pay for buffers and caches.
	fbWarm = 2
	// The paths not taken are timed again after fbFirst calls, then at
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

// The paths are indexed by codec.Kind: Raw (uncoded), Zip3, Huff.
const nPaths = 3

type history struct {
	calls       int // calls the model coded
	runs        [nPaths]int
	got         [nPaths]samples
	pref        codec.Kind // the preference at the last re-timing
	next, every int        // call of the next re-timing; the interval
	turn        int        // re-timings so far, to take the others in turn
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
	model := d.Kind
	alt := codec.Huff
	if model == codec.Huff {
		alt = codec.Zip3
	}
	// the paths worth timing: the model's, raw, and the other codec where
	// the model would code with that one too (it beats raw by the margin)
	paths := []codec.Kind{model, codec.Raw}
	if predict(in, th, alt) < (1-th.Margin)*d.PredRaw {
		paths = append(paths, alt)
	}
	run, why := model, ""
	pending := false // a path ran but its time has not come back yet
	for _, p := range paths {
		pending = pending || h.runs[p] > 0 && h.got[p].n == 0
	}
	switch {
	case h.runs[model] < fbWarm:
	case h.runs[codec.Raw] == 0:
		run, why = codec.Raw, "feedback: timing the raw path once"
		h.next, h.every = h.calls+fbFirst, fbFirst
	case len(paths) == 3 && h.runs[alt] == 0:
		run, why = alt, "feedback: timing "+alt.String()+" once"
	case pending:
		// a first timing is on its way: keep the model's choice
	default:
		best := paths[0]
		for _, p := range paths[1:] {
			if h.got[p].best() < h.got[best].best() {
				best = p
			}
		}
		run = best
		if best != model {
			why = fmt.Sprintf("measured: %s fastest (%s)", pathName(best), measuredTimes(&h, paths))
		} else {
			d.Why = fmt.Sprintf("%s; measured: %s", d.Why, measuredTimes(&h, paths))
		}
		if h.calls >= h.next {
			if best == h.pref {
				h.every = min(2*h.every, fbMaxEvery)
			} else {
				h.every = fbFirst
			}
			h.pref, h.next = best, h.calls+h.every
			others := make([]codec.Kind, 0, 2)
			for _, p := range paths {
				if p != best {
					others = append(others, p)
				}
			}
			run = others[h.turn%len(others)]
			h.turn++
			why = fmt.Sprintf("feedback: timing %s again (%s)", pathName(run), measuredTimes(&h, paths))
		}
	}
	h.runs[run]++
	if run == model {
		if why != "" { // the model's choice, run to time it again
			d.Why = why + "; " + d.Why
		}
		return d, Step{ok: true, key: k, h: h}
	}
	out := d
	if run == codec.Raw {
		never := in
		never.Mode = Never
		out = Decide(never, th) // same family, so the same result bits
		out.PredRaw, out.PredCoded = d.PredRaw, d.PredCoded
	} else {
		out.Kind = run
	}
	out.Why = why + "; " + d.Why
	out.Measured = true
	return out, Step{ok: true, key: k, h: h}
}

func pathName(k codec.Kind) string {
	if k == codec.Raw {
		return "raw"
	}
	return k.String()
}

// measuredTimes lists the fastest measured time of each path.
func measuredTimes(h *history, paths []codec.Kind) string {
	out := ""
	for i, p := range paths {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %.3gs", pathName(p), h.got[p].best())
	}
	return out
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
	got := h.got
	*h = s.h
	h.got = got
}

// Record adds the measured seconds of one call of k that ran with kind
// (codec.Raw: uncoded), the group's agreed figure, the same on every rank.
// Calls the model never coded, and times that are not positive and
// finite, are ignored.
func (f *Feedback) Record(k Key, kind codec.Kind, sec float64) {
	h := f.calls[k]
	if h == nil || !(sec > 0) || math.IsInf(sec, 0) || int(kind) >= nPaths {
		return
	}
	h.got[kind].add(sec)
}
