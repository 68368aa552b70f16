package collective

import "github.com/zipccl/zipccl/backend/internal/bufs"

// Tuning knobs. They are read once at the start of every operation, so a
// tuner may change them between operations (not concurrently with running
// ones). Every rank of a group must use the same values: they decide the
// algorithm and the message boundaries, and a rank that disagrees with its
// peers fails with a length mismatch from the Conn rather than producing
// wrong results.
var (
	// AllReduceDirectMax is the largest number of bytes one rank sends in a
	// direct-exchange all-reduce, len(buf)*(size-1). Below it every rank
	// sends its whole buffer to every other rank in one round (latency
	// bound); above it the bandwidth-optimal pipelined ring is used. Scaling
	// by size-1 keeps the direct path's traffic bounded in large groups. On
	// loopback TCP the crossover measured near 256 KiB buffers at 2 ranks
	// and 64 KiB at 4, which this default reproduces.
	AllReduceDirectMax = 256 << 10

	// ReduceScatterDirectMax is the largest len(In[0])*(size-1) for which
	// reduce-scatter sends every block straight to its owner in one round
	// instead of running the ring.
	ReduceScatterDirectMax = 256 << 10

	// ReduceDirectMax is the largest len(In[0])*(size-1) for which reduce
	// sends every rank's buffer straight to the root (which then reduces)
	// instead of running a ring reduce-scatter followed by a gather.
	ReduceDirectMax = 256 << 10

	// AllGatherDirectMax is the largest total output size (sum of len(Out))
	// for which all-gather sends every shard straight to every rank instead
	// of running the ring.
	AllGatherDirectMax = 256 << 10

	// BroadcastDirectMax is the largest len(buf)*(size-1) for which the root
	// sends its buffer to every rank itself instead of starting a pipelined
	// chain root -> root+1 -> ... -> root-1.
	BroadcastDirectMax = 256 << 10

	// SegmentMin and SegmentMax bound the pipelining unit (bytes) of the
	// ring and chain algorithms. A block of n bytes is cut into segments of
	// about n/SegmentsPerBlock bytes, clamped to [SegmentMin, SegmentMax]:
	// small enough that receiving segment k+1 overlaps reducing segment k and
	// forwarding starts early, large enough to amortise per-message cost.
	SegmentMin = 256 << 10
	// SegmentMax is the upper bound of the segment size; see SegmentMin.
	SegmentMax = 4 << 20
	// SegmentsPerBlock is the number of segments a block is aimed to be cut
	// into before clamping; see SegmentMin.
	SegmentsPerBlock = 8

	// Prefetch is how many receives a pipelined algorithm keeps posted at
	// once. A message that arrives before its receive is posted costs the
	// engine an allocation and an extra copy; with several posted, the next
	// segments land straight in our buffers even when the receiving
	// goroutine is scheduled late.
	Prefetch = 8

	// PrefetchBytes caps the scratch that posted reduce-scatter receives
	// hold (each needs a segment-sized buffer): the window shrinks to
	// PrefetchBytes/segment, but never below 2.
	PrefetchBytes = 16 << 20
)

// maxSegments is the number of distinct segment indices a Slot can carry.
const maxSegments = 1 << 16

// maxSteps is the number of distinct step indices a Slot can carry without
// touching the engine's reserved top bit.
const maxSteps = 1 << 15

// tuning is a snapshot of the knobs taken when an operation starts, so one
// operation never sees a mix of old and new values.
type tuning struct {
	segMin, segMax, segPer, prefetch, prefetchBytes int
}

func loadTuning() tuning {
	t := tuning{segMin: SegmentMin, segMax: SegmentMax, segPer: SegmentsPerBlock, prefetch: Prefetch, prefetchBytes: PrefetchBytes}
	if t.segPer < 1 {
		t.segPer = 1
	}
	if t.segMin < 1 {
		t.segMin = 1
	}
	if t.segMax < t.segMin {
		t.segMax = t.segMin
	}
	if t.prefetch < 1 {
		t.prefetch = 1
	}
	return t
}

// scratchWindow is the number of receives to keep posted when each holds a
// scratch buffer of seg bytes.
func (t tuning) scratchWindow(seg int) int {
	return max(2, min(t.prefetch, t.prefetchBytes/max(seg, 1)))
}

// segSize returns the segment size for a block of n bytes whose elements are
// gran bytes wide. It depends only on (n, gran) and the knobs, so the sender
// and the receiver of a block cut it identically without talking. Segments
// are whole elements, and there are never more than maxSegments of them.
func (t tuning) segSize(n, gran int) int {
	s := min(max(n/t.segPer, t.segMin), t.segMax)
	s = max(s, bufs.CeilDiv(n, maxSegments))
	s = bufs.CeilDiv(s, gran) * gran
	return max(s, gran)
}

// segments describes how one block is cut into pipelining segments.
type segments struct {
	buf  []byte
	size int // segment size; the last one may be shorter
	n    int // number of segments; 0 for an empty block
}

func (t tuning) cut(buf []byte, gran int) segments {
	s := t.segSize(len(buf), gran)
	return segments{buf: buf, size: s, n: bufs.CeilDiv(len(buf), s)}
}

// at returns segment k of the block (capacity clipped so no callee can write
// past it).
func (s segments) at(k int) []byte {
	lo := k * s.size
	hi := min(lo+s.size, len(s.buf))
	return s.buf[lo:hi:hi]
}

// of returns segment k of another block of the same length (the same cut
// applied to, e.g., the destination of a block).
func (s segments) of(buf []byte, k int) []byte {
	lo := k * s.size
	hi := min(lo+s.size, len(buf))
	return buf[lo:hi:hi]
}
