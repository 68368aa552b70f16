package switcher

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
)

// path is how a decision runs: codec.Raw when uncoded.
func path(d Decision) codec.Kind {
	if d.Coded {
		return d.Kind
	}
	return codec.Raw
}

// fbRun makes calls of one key through f, as the engine does: decide, run,
// and once the call is agreed, commit its step and record the time of the
// call before it (the engine learns a call's group-wide time with the next
// call's check). sec gives a call's time by its number and path. It
// returns the path of each call.
func fbRun(f *Feedback, input Input, calls int, sec func(call int, p codec.Kind) float64) []codec.Kind {
	var ran []codec.Kind
	for i := 0; i < calls; i++ {
		d, st := f.Decide(input, DefaultThresholds)
		if i > 0 {
			f.Record(KeyOf(input), ran[i-1], sec(i-1, ran[i-1]))
		}
		f.Commit(st)
		ran = append(ran, path(d))
	}
	return ran
}

// times returns a sec for fbRun with a fixed time per path.
func times(raw, zip3, huff float64) func(int, codec.Kind) float64 {
	return func(_ int, p codec.Kind) float64 { return [3]float64{raw, zip3, huff}[p] }
}

func count(ran []codec.Kind, p codec.Kind) int {
	n := 0
	for _, r := range ran {
		if r == p {
			n++
		}
	}
	return n
}

const (
	raw  = codec.Raw
	zip3 = codec.Zip3
	huff = codec.Huff
)

// At 1 Gbit/s the model codes with huff and would code with zip3 too:
// both other paths are timed once, then the fastest runs.
func TestFeedbackKeepsTheModelsChoiceWhenItIsFastest(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, gigabit)
	require.Equal(t, huff, Decide(input, DefaultThresholds).Kind)
	ran := fbRun(&f, input, 2000, times(0.6, 0.45, 0.4))
	// warm-up, raw once, zip3 once, huff while that time comes back
	require.Equal(t, []codec.Kind{huff, huff, raw, zip3, huff, huff}, ran[:6])
	// the others are timed again at 32, 64, 128, ... call intervals, in turn
	others := count(ran, raw) + count(ran, zip3)
	require.GreaterOrEqual(t, others, 5)
	require.LessOrEqual(t, others, 12, "re-timing backs off while huff keeps winning")
	require.Greater(t, count(ran[6:], raw), 0)
	require.Greater(t, count(ran[6:], zip3), 0)
}

// Where the model picked the slower codec (here its huff speed was
// measured too low), the other one takes over.
func TestFeedbackSwitchesToTheFasterCodec(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, gigabit)
	ran := fbRun(&f, input, 200, times(0.6, 0.38, 0.4))
	require.Equal(t, []codec.Kind{huff, huff, raw, zip3, huff, zip3, zip3}, ran[:7])
	require.Greater(t, count(ran, zip3), 190)
	d, _ := f.Decide(input, DefaultThresholds)
	require.True(t, d.Coded && d.Zcoll && d.Measured)
	require.Equal(t, zip3, d.Kind)
	require.Contains(t, d.Why, "measured")
}

func TestFeedbackFallsBackToRawWhenCodingLoses(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	model := Decide(input, DefaultThresholds)
	require.True(t, model.Coded, "the model codes this call")
	require.Equal(t, zip3, model.Kind)
	// huff is not expected to beat raw here, so it is never timed
	ran := fbRun(&f, input, 500, times(0.060, 0.070, 0.050))
	require.Equal(t, []codec.Kind{zip3, zip3, raw, zip3, raw, raw}, ran[:6])
	require.Zero(t, count(ran, huff))
	require.GreaterOrEqual(t, count(ran, raw), 490, "raw from the first measured comparison on")
	require.Greater(t, count(ran[6:], zip3), 0, "coded is timed again now and then")

	d, _ := f.Decide(input, DefaultThresholds)
	require.False(t, d.Coded)
	never := input
	never.Mode = Never
	require.Equal(t, Decide(never, DefaultThresholds).Zcoll, d.Zcoll)
	require.Contains(t, d.Why, "measured")
	require.True(t, d.Measured)
	require.False(t, model.Measured)
}

// When the link changes (here, coded becomes the faster path half way),
// the re-timing finds it.
func TestFeedbackFollowsAChange(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	ran := fbRun(&f, input, 400, func(call int, p codec.Kind) float64 {
		if (p != raw) == (call < 200) {
			return 0.070
		}
		return 0.060
	})
	require.Greater(t, count(ran[:200], raw), 180)
	require.Greater(t, count(ran[300:], zip3), 95)
}

// A reduction's raw path stays in the two-shot family, so switching never
// changes the result's bits.
func TestFeedbackRawReductionStaysTwoShot(t *testing.T) {
	var f Feedback
	input := in(AllReduce, dtype.BFloat16, 64<<20, Auto, tenGig)
	ran := fbRun(&f, input, 3, times(1, 1, 1))
	require.Equal(t, []codec.Kind{zip3, zip3, raw}, ran)
	var g Feedback
	for i := 0; i < 3; i++ {
		d, st := g.Decide(input, DefaultThresholds)
		g.Commit(st)
		require.True(t, d.Zcoll, "call %d", i)
	}
}

// Feedback leaves alone what the model does not code, and every mode but
// Auto; bad times are ignored.
func TestFeedbackScope(t *testing.T) {
	var f Feedback
	for _, input := range []Input{
		in(AllToAll, dtype.BFloat16, 64<<20, Auto, loopback),
		in(AllToAll, dtype.BFloat16, 64<<20, Always, tenGig),
		in(AllToAll, dtype.BFloat16, 64<<20, Never, tenGig),
		in(AllToAll, dtype.Int32, 64<<20, Auto, tenGig),
	} {
		want := Decide(input, DefaultThresholds)
		for i := 0; i < 10; i++ {
			d, st := f.Decide(input, DefaultThresholds)
			require.Equal(t, want, d, "%+v", input)
			f.Commit(st)
			f.Record(KeyOf(input), path(d), 1)
		}
	}
	require.Empty(t, f.calls, "only calls the model coded are tracked")

	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	ran := fbRun(&f, input, 50, times(math.Inf(1), 1, 1)) // never a usable raw time
	require.Equal(t, 1, count(ran, raw), "no raw time: the model's choice stands")
}

// Two Feedbacks fed the same sequence decide alike (what keeps the ranks
// in step), and the table stays bounded.
func TestFeedbackDeterministicAndBounded(t *testing.T) {
	var a, b Feedback
	for i := 0; i < 3*fbMaxKeys; i++ {
		input := in(AllGather, dtype.BFloat16, 1<<20+i%(2*fbMaxKeys)*64, Auto, gigabit)
		da, sa := a.Decide(input, DefaultThresholds)
		db, sb := b.Decide(input, DefaultThresholds)
		require.Equal(t, da, db)
		a.Commit(sa)
		b.Commit(sb)
		a.Record(KeyOf(input), path(da), float64(i%7+1))
		b.Record(KeyOf(input), path(db), float64(i%7+1))
		require.LessOrEqual(t, len(a.calls), fbMaxKeys)
	}
}

// A decision that is never committed (the ranks disagreed on the call, so
// none of them commits) leaves the state as it was: afterwards f decides
// exactly like a Feedback that never saw it.
func TestFeedbackUncommittedLeavesNoTrace(t *testing.T) {
	var f, fresh Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	sec := times(0.060, 0.070, 0.080)
	for i := 0; i < 3; i++ {
		f.Decide(input, DefaultThresholds)
	}
	require.Equal(t, fbRun(&fresh, input, 100, sec), fbRun(&f, input, 100, sec))
	// and a committed one does leave a trace
	var g Feedback
	_, st := g.Decide(input, DefaultThresholds)
	g.Commit(st)
	fresh = Feedback{}
	require.NotEqual(t, fbRun(&fresh, input, 100, sec), fbRun(&g, input, 100, sec))
}

// A re-timing says so, whichever path it runs.
func TestFeedbackSaysWhyItRetimes(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	sec := times(0.060, 0.070, 0.080)
	var prev codec.Kind
	retimed := 0
	for i := 0; i < 200; i++ {
		d, st := f.Decide(input, DefaultThresholds)
		if i > 0 {
			f.Record(KeyOf(input), prev, sec(i-1, prev))
		}
		f.Commit(st)
		prev = path(d)
		if i > 5 && d.Coded {
			require.Contains(t, d.Why, "feedback: timing zip3 again", "call %d", i)
			require.False(t, d.Measured, "the model's own choice")
			retimed++
		}
	}
	require.Greater(t, retimed, 1)
}
