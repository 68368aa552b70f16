// Package zcoll holds the compressed collective algorithms: all-gather,
// all-to-all (ZipCCL designs 1 and 2), reduce-scatter (all-to-all plus a
// rank-order local reduction), two-shot all-reduce and split-send broadcast
// (UCCL-Zip), over a collective.VarConn.
//
// Every algorithm runs in one of two modes chosen by Plan.Framed, and the
// two give bit-identical results: only the representation of the data on
// the wire differs (the codec is lossless), and every reduction happens on
// decoded values in a fixed order that depends only on the group size and
// the buffer length, never on the Plan, the segment size or the order in
// which messages arrive. So the engine may switch compression on or off
// from one call to the next without ever changing a result.
//
//   - Plain (Framed false): raw bytes, sent straight from In/Out and
//     received straight into Out where nothing is reduced.
//   - Framed: each segment (Plan.Segment bytes) is coded independently with
//     package codec, either as one self-describing frame (received with
//     RecvUpTo, so the message length is the compressed size and no
//     separate size exchange is needed) or, for all-to-all design 2 and
//     broadcast, as a static part (its length depends only on the element
//     count) and a dynamic part sent as two messages (split mode). Every
//     frame and part is checked (CRC-32C per codec block) when decoded; a
//     corrupted message fails the operation, never yields a wrong tensor.
//
// All ranks must pass the same Plan to one call (it decides the messages).
//
// Who codes a segment is each rank's own choice (Args.Coder): the CPU
// codec by default, or package gpu's coder for CUDA device memory, which
// writes the same bytes. With a DeviceMemory coder zcoll never reads or
// writes In, Out or its scratch itself, and a reduce-scatter keeps the
// received contributions coded until one device fold decodes and reduces
// them together.
//
// # Partition and reduction order
//
// Reduce-scatter: rank j owns block j (In[j] on every rank). Every rank
// sends In[j] to rank j (segment by segment); rank j reduces the N
// contributions of each segment in rank order:
//
//   - bfloat16, float16, float8 SUM and PRODUCT: in float32,
//     acc = wide(x[0]) op wide(x[1]); acc = acc op wide(x[i]) for
//     i = 2..N-1; one rounding to the dtype at the end (reduce.AccumInit,
//     Accum, AccumFinish). For N = 2 that equals reduce.Reduce3.
//   - everything else (float32, float64, integers, bool, and MIN/MAX of
//     every type, which are exact and so keep NaN payloads): in the dtype
//     itself, ((x[0] op x[1]) op x[2]) ... op x[N-1] with reduce.Reduce.
//
// With N = 1 the result is a copy of the input. The order never depends on
// arrival order or on the Plan.
//
// All-reduce is that reduce-scatter on the buffer cut into N blocks of
// whole elements, block b holding numel/N elements plus one more for
// b < numel%N (the first numel%N blocks are one element longer; blocks are
// consecutive, block 0 first; this is collective's split), followed by the
// all-gather of the reduced blocks. Every element is reduced once, by its
// block's owner, and copied bit for bit to the others.
//
// # Segments and message slots
//
// A block of L bytes is cut into segments of S bytes (Plan.Segment rounded
// down to whole elements, a default when 0, raised so that no block has
// more than 65536 segments); the last one may be shorter. Segment k of
// a block travels in message slot collective.Slot(step, k):
//
//	AllGather        Slot(t, k), ring step t = 0..N-2
//	AllToAll         plain and design 1: Slot(0, k); design 2: static part
//	                 Slot(0, k), dynamic part Slot(1, k)
//	ReduceScatter    as AllToAll
//	AllReduce        reduce-scatter as AllToAll (steps 0, 1), then the
//	                 direct all-gather: Slot(2, k) from each block's owner
//	Broadcast        plain: Slot(0, k); framed: static Slot(0, k), dynamic
//	                 Slot(1, k)
//	SendSplit        static Slot(0, k), dynamic Slot(1, k)
//	Hier*            each phase as its algorithm above, its steps moved up
//	                 by phase*(max(H, R)+2) (hier.go)
//
// # Concurrency
//
// Like package collective: an operation returns only after every goroutine
// it started has exited, and never touches In/Out afterwards; the first
// error cancels the rest (in all-to-all, an error that concerns one
// exchange only leaves the others running); scratch comes from Args.Pool;
// encoders and decoders are reused through sync.Pools.
package zcoll

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// Plan says how an operation moves its data. The zero value is plain mode.
type Plan struct {
	// Framed codes every segment with package codec. False sends raw bytes
	// without any framing (the same algorithm, uncompressed).
	Framed bool
	// Kind is the codec kind per segment when Framed: Zip3, Huff, Auto
	// (chosen per segment from a sample), or Raw (frames without coding,
	// still checksummed). Whole frames fall back to Raw per segment when
	// coding would expand them. Dtypes without a coded format (float64,
	// integers, bool) are always framed Raw.
	Kind codec.Kind
	// Segment is the number of bytes per independently coded segment (and
	// pipelining unit); 0 means a default (see SegmentMin). Rounded down to
	// whole elements, and raised where a block would otherwise have more
	// than 65536 segments.
	Segment int
	// A2ADesign selects the framed all-to-all (also inside reduce-scatter
	// and all-reduce): 1 (or 0) sends one self-sized frame per segment;
	// 2 is ZipCCL's design 2, the static part of every segment first (its
	// length is known from the element count and the kind), then the
	// dynamic part. With Kind Auto, design 2 resolves the kind per segment
	// on the sender and the receiver learns it from the dynamic part.
	A2ADesign int
}

// Default segment sizes (Plan.Segment 0): about an eighth of the block, so
// that the pipeline has a few stages, but at least SegmentMin (per-message
// costs) and at most DefaultSegment in framed mode (coding one segment
// overlaps sending the previous; a multiple of every codec block) or
// DefaultPlainSegmentMax in plain mode (which only pipelines the reduction
// and prefers fewer, larger messages). Framed defaults are rounded down to
// whole codec blocks of 65536 elements.
const (
	SegmentMin             = 256 << 10
	DefaultSegment         = 1 << 20
	DefaultPlainSegmentMax = 2 << 20
)

// maxSegments is the number of segment indices a collective.Slot carries.
const maxSegments = 1 << 16

// maxSteps is the number of step indices a Slot carries below the engine's
// reserved top bit.
const maxSteps = 1 << 15

// Stats accumulates codec and reduction work. All fields are updated
// atomically and may be read at any time; one Stats may be shared by many
// operations. A nil *Stats records nothing.
type Stats struct {
	EncodeNs     atomic.Int64 // time spent encoding
	DecodeNs     atomic.Int64 // time spent decoding
	ReduceNs     atomic.Int64 // time spent in local reductions
	RawBytes     atomic.Int64 // bytes fed to the encoder
	CodedBytes   atomic.Int64 // bytes the encoder produced (frames, parts, trailers)
	DecodedBytes atomic.Int64 // bytes the decoder produced
	Segments     atomic.Int64 // segments encoded
	// SentRaw is what the messages this rank sent stand for uncoded: the
	// decoded length of every frame (forwarded ones too) and split
	// segment, the length of every plain message. SentRaw over the bytes
	// actually sent is the op's compression ratio on the wire.
	SentRaw atomic.Int64
}

func (s *Stats) sent(raw int) {
	if s != nil {
		s.SentRaw.Add(int64(raw))
	}
}

func (s *Stats) encoded(start time.Time, raw, coded int) {
	if s != nil {
		s.EncodeNs.Add(int64(time.Since(start)))
		s.RawBytes.Add(int64(raw))
		s.CodedBytes.Add(int64(coded))
		s.Segments.Add(1)
	}
}

func (s *Stats) decoded(start time.Time, raw int) {
	if s != nil {
		s.DecodeNs.Add(int64(time.Since(start)))
		s.DecodedBytes.Add(int64(raw))
	}
}

func (s *Stats) reduced(start time.Time) {
	if s != nil {
		s.ReduceNs.Add(int64(time.Since(start)))
	}
}

// Ratio is RawBytes / CodedBytes (0 before anything was coded).
func (s *Stats) Ratio() float64 {
	c := s.CodedBytes.Load()
	if c == 0 {
		return 0
	}
	return float64(s.RawBytes.Load()) / float64(c)
}

// Args are the operands of one operation: collective.Args (same buffer
// contracts as package collective) plus the Plan and optional Stats.
type Args struct {
	collective.Args
	Plan  Plan
	Stats *Stats
	// Coder codes the segments; nil is HostCoder(Args.Pool). A
	// DeviceMemory coder makes In and Out device memory, which zcoll then
	// never reads or writes itself.
	Coder Coder
}

// run is the state shared by the parts of one operation.
type run struct {
	op     string // "allgather", ...
	algo   string // "ring", "pairwise", ...
	c      collective.VarConn
	n, me  int
	dt     dtype.DType
	es     int // element size (1 for an invalid dtype in copy-only ops)
	framed bool
	kind   codec.Kind // effective for dt (Raw for uncoded dtypes)
	design int        // 1 or 2
	segReq int        // Plan.Segment, normalised
	pool   *collective.Pool
	st     *Stats
	co     Coder
	dev    DeviceMemory // non-nil: In, Out and scratch are device memory
}

func newRun(op, algo string, c collective.VarConn, a *Args, rooted bool) (*run, error) {
	n, me := c.Size(), c.Rank()
	if n < 1 || me < 0 || me >= n {
		return nil, fmt.Errorf("zcoll: %s: invalid rank %d in group of %d", op, me, n)
	}
	if rooted && (a.Root < 0 || a.Root >= n) {
		return nil, fmt.Errorf("zcoll: %s: root %d out of range for group of %d", op, a.Root, n)
	}
	p := a.Plan
	switch p.Kind {
	case codec.Raw, codec.Zip3, codec.Huff, codec.Auto:
	default:
		return nil, fmt.Errorf("zcoll: %s: invalid codec kind %v", op, p.Kind)
	}
	design := p.A2ADesign
	switch design {
	case 0:
		design = 1
	case 1, 2:
	default:
		return nil, fmt.Errorf("zcoll: %s: invalid all-to-all design %d (want 1 or 2)", op, p.A2ADesign)
	}
	if p.Segment < 0 {
		return nil, fmt.Errorf("zcoll: %s: negative segment size %d", op, p.Segment)
	}
	es := a.DType.Size()
	if p.Framed && !a.DType.Valid() {
		return nil, fmt.Errorf("zcoll: %s: framed mode needs a valid dtype, got %v", op, a.DType)
	}
	if es == 0 {
		es = 1
	}
	co := a.Coder
	if co == nil {
		co = HostCoder(a.Pool)
	}
	dev, _ := co.(DeviceMemory)
	if dev != nil && (!p.Framed || p.Kind == codec.Auto) {
		return nil, fmt.Errorf("zcoll: %s: device memory needs framed mode with a concrete codec kind (plain mode and auto read the data on the host)", op)
	}
	return &run{
		op: op, algo: algo, c: c, n: n, me: me, dt: a.DType, es: es,
		framed: p.Framed, kind: codec.EffectiveKind(a.DType, p.Kind), design: design,
		segReq: p.Segment, pool: a.Pool, st: a.Stats, co: co, dev: dev,
	}, nil
}

// copyData copies src into dst, two buffers of the operation.
func (r *run) copyData(dst, src []byte) error {
	if r.dev != nil {
		return r.dev.Copy(dst, src)
	}
	copy(dst, src)
	return nil
}

// checkReduce validates a reduction's dtype and op (AVG and PREMUL_SUM must
// have been resolved by the engine) and the buffer lengths.
func checkReduce(op string, a *Args, lens ...int) error {
	if _, err := bufs.CheckReduce(a.DType, a.Op, lens...); err != nil {
		return fmt.Errorf("zcoll: %s: %w", op, err)
	}
	return nil
}

func need(op, what string, got, want int) error {
	if err := bufs.Need(what, got, want); err != nil {
		return fmt.Errorf("zcoll: %s: %w", op, err)
	}
	return nil
}
