package switcher

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
)

// fbRun makes calls of one key through f, as the engine does: decide, run,
// and once the call is agreed, commit its step and record the time of the
// call before it (the engine learns a call's group-wide time with the next
// call's check).
// sec gives a call's time by whether it ran coded. It returns the coded
// flag of each call.
func fbRun(f *Feedback, input Input, calls int, sec func(call int, coded bool) float64) []bool {
	var ran []bool
	for i := 0; i < calls; i++ {
		d, st := f.Decide(input, DefaultThresholds)
		if i > 0 {
			f.Record(KeyOf(input), ran[i-1], sec(i-1, ran[i-1]))
		}
		f.Commit(st)
		ran = append(ran, d.Coded)
	}
	return ran
}

func count(ran []bool, coded bool) int {
	n := 0
	for _, c := range ran {
		if c == coded {
			n++
		}
	}
	return n
}

func TestFeedbackKeepsCodingWhenItPays(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, gigabit)
	ran := fbRun(&f, input, 2000, func(_ int, coded bool) float64 {
		if coded {
			return 0.4
		}
		return 0.6
	})
	// warm-up, one raw timing, then coded
	require.Equal(t, []bool{true, true, false, true, true}, ran[:5])
	// the raw path is timed again at 32, 64, 128, ... call intervals
	raws := count(ran, false)
	require.GreaterOrEqual(t, raws, 3)
	require.LessOrEqual(t, raws, 8, "re-timing backs off while coding keeps winning")
}

func TestFeedbackFallsBackToRawWhenCodingLoses(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	require.True(t, Decide(input, DefaultThresholds).Coded, "the model codes this call")
	ran := fbRun(&f, input, 500, func(_ int, coded bool) float64 {
		if coded {
			return 0.070
		}
		return 0.060
	})
	require.Equal(t, []bool{true, true, false, true, false, false}, ran[:6])
	require.GreaterOrEqual(t, count(ran, false), 490, "raw from the first measured comparison on")
	require.Greater(t, count(ran[6:], true), 0, "coded is timed again now and then")

	d, _ := f.Decide(input, DefaultThresholds)
	require.False(t, d.Coded)
	require.Equal(t, Decide(Input{Op: AllToAll, DType: dtype.BFloat16, Bytes: 64 << 20, Ranks: 4, Mode: Never, Profile: tenGig}, DefaultThresholds).Zcoll, d.Zcoll)
	require.Contains(t, d.Why, "measured")
	require.True(t, d.Measured)
	require.False(t, Decide(input, DefaultThresholds).Measured)
}

// When the link changes (here, coded becomes the faster path half way),
// the re-timing finds it.
func TestFeedbackFollowsAChange(t *testing.T) {
	var f Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	ran := fbRun(&f, input, 400, func(call int, coded bool) float64 {
		if coded == (call < 200) {
			return 0.070
		}
		return 0.060
	})
	require.Greater(t, count(ran[:200], false), 180)
	require.Greater(t, count(ran[300:], true), 95)
}

// A reduction's raw alternative stays in the two-shot family, so switching
// never changes the result's bits.
func TestFeedbackRawReductionStaysTwoShot(t *testing.T) {
	var f Feedback
	input := in(AllReduce, dtype.BFloat16, 64<<20, Auto, tenGig)
	ran := fbRun(&f, input, 3, func(int, bool) float64 { return 1 })
	require.Equal(t, []bool{true, true, false}, ran)
	d, _ := f.Decide(input, DefaultThresholds)
	require.True(t, d.Zcoll)
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
			f.Record(KeyOf(input), want.Coded, 1)
		}
	}
	require.Empty(t, f.calls, "only calls the model coded are tracked")

	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	ran := fbRun(&f, input, 50, func(_ int, coded bool) float64 {
		if coded {
			return 1
		}
		return math.Inf(1) // never a usable raw time
	})
	require.Equal(t, 1, count(ran, false), "no raw time: the model's choice stands")
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
		a.Record(KeyOf(input), da.Coded, float64(i%7+1))
		b.Record(KeyOf(input), db.Coded, float64(i%7+1))
		require.LessOrEqual(t, len(a.calls), fbMaxKeys)
	}
}

// A decision that is never committed (the ranks disagreed on the call, so
// none of them commits) leaves the state as it was: afterwards f decides
// exactly like a Feedback that never saw it.
func TestFeedbackUncommittedLeavesNoTrace(t *testing.T) {
	var f, fresh Feedback
	input := in(AllToAll, dtype.BFloat16, 64<<20, Auto, tenGig)
	sec := func(_ int, coded bool) float64 {
		if coded {
			return 0.070
		}
		return 0.060
	}
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
