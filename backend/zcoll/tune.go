package zcoll

// Tuning knobs. They are read when an operation starts, so a tuner may
// change them between operations (not concurrently with running ones).
// Unlike the Plan they do not change the messages, only how many are in
// flight, so ranks may disagree on them.
var (
	// PostedBytes is about how many bytes of one stream (the segments from
	// one peer, or one part kind in split mode) are kept in posted receives
	// at once. A message that arrives before its receive is posted costs the
	// transport an allocation and an extra copy.
	PostedBytes = 16 << 20

	// MaxPosted bounds the number of receives (each a goroutine) posted per
	// stream.
	MaxPosted = 16

	// PrefetchBytes caps the scratch held by the posted receives of an
	// operation whose received segments are reduced (reduce-scatter,
	// all-reduce) or decoded: the per-stream window shrinks to fit, but
	// never below 2.
	PrefetchBytes = 128 << 20
)

// windowFor returns the number of receives to keep posted for each of
// streams streams of seg-byte segments: about PostedBytes per stream, and
// where each holds scratch (twice: received and not yet consumed) no more
// than PrefetchBytes in all; at least 2 and at most MaxPosted.
func windowFor(seg, streams int, scratch bool) int {
	seg = max(1, seg)
	w := PostedBytes / seg
	if scratch {
		w = min(w, PrefetchBytes/(2*seg*max(1, streams)))
	}
	return min(max(2, w), max(2, MaxPosted))
}
