package zcoll

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// cut describes how a block of total bytes is cut into segments.
type cut struct {
	size  int // segment size; the last one may be shorter
	n     int // number of segments; 0 for an empty block
	total int
}

// segSize is the segment size for a block of nbytes of es-byte elements
// when want bytes were asked for (0: the default). It depends only on its
// arguments, so the sender and the receiver of a block cut it alike.
func segSize(nbytes, es, want int, framed bool) int {
	if want <= 0 {
		// about 8 segments per block, within [SegmentMin, the mode's max];
		// framed segments are whole codec blocks (65536 elements) where
		// they can be
		hi := DefaultPlainSegmentMax
		if framed {
			hi = DefaultSegment
		}
		want = min(max(nbytes/8, SegmentMin), hi)
		if cb := 1 << 16 * es; framed && want >= cb {
			want = want / cb * cb
		}
	}
	s := max(want/es*es, es)
	if nbytes > 0 {
		s = max(s, bufs.CeilDiv(bufs.CeilDiv(nbytes, maxSegments), es)*es)
	}
	return s
}

func (r *run) cut(nbytes int) cut {
	s := segSize(nbytes, r.es, r.segReq, r.framed)
	return cut{size: s, n: bufs.CeilDiv(nbytes, s), total: nbytes}
}

// len is the length of segment k.
func (c cut) len(k int) int { return min(c.size, c.total-k*c.size) }

// of returns segment k of buf (a block of c.total bytes), capacity clipped.
func (c cut) of(buf []byte, k int) []byte {
	lo := k * c.size
	hi := min(lo+c.size, len(buf))
	return buf[lo:hi:hi]
}

// Coders are reused across operations; each is used by one goroutine at a
// time.
var (
	encoders = sync.Pool{New: func() any { return codec.NewEncoder() }}
	decoders = sync.Pool{New: func() any { return codec.NewDecoder() }}
)

// reallocs counts encodes whose output outgrew the pooled buffer (tests
// check it stays 0: each one would be an allocation per segment).
var reallocs atomic.Int64

// CorruptError reports a received frame or part that failed to decode (a
// checksum mismatch, a malformed or truncated message, or one that does not
// describe the expected segment). It concerns one exchange only.
type CorruptError struct {
	Err error
}

func (e *CorruptError) Error() string { return "zcoll: corrupt message: " + e.Err.Error() }

// Unwrap returns the cause (wrapping one of codec's errors, or a mismatch).
func (e *CorruptError) Unwrap() error { return e.Err }

// PairLocal reports that the failure concerns one exchange only.
func (e *CorruptError) PairLocal() bool { return true }

func corrupt(format string, args ...any) error {
	return &CorruptError{Err: fmt.Errorf(format, args...)}
}

// resolve returns the concrete kind to code src with.
func resolve(src []byte, dt dtype.DType, k codec.Kind) codec.Kind {
	if k == codec.Auto {
		k = codec.ChooseKind(src, dt)
	}
	return codec.EffectiveKind(dt, k)
}

// frameCap bounds the buffer Encoder.Encode needs (including its transient
// headroom) for nbytes of dt coded as the concrete kind k.
func frameCap(nbytes int, dt dtype.DType, k codec.Kind) int {
	// Encode reserves an extra Align bytes; coded kinds fall back to the
	// raw frame in the same buffer.
	raw := codec.MaxEncodedLen(nbytes, dt) + codec.Align
	numel := nbytes / dt.Size()
	st := codec.StaticLen(numel, dt, k)
	switch k {
	case codec.Zip3: // at most one escape byte per element, then padding
		return max(raw, codec.HeaderLen+st+2*codec.Align+numel)
	case codec.Huff:
		return max(raw, codec.HeaderLen+st+2*codec.Align+numel+huffSlack+2*bufs.CeilDiv(numel, 1<<16))
	}
	return raw
}

// huffSlack is the Huffman coder's transient headroom: the encoder reserves
// 3 blocks' worth of bytes, and a block in progress may need up to 19/8
// bytes per element of one 65536-element block.
const huffSlack = 3 << 16

// encodeFrame codes src (one segment) as one frame in a message buffer.
func (r *run) encodeFrame(src []byte) ([]byte, error) {
	return encodeFrame(r.co, r.st, src, r.dt, r.kind)
}

func encodeFrame(co Coder, st *Stats, src []byte, dt dtype.DType, kind codec.Kind) ([]byte, error) {
	start := time.Now()
	f, err := co.EncodeFrame(src, dt, resolve(src, dt, kind))
	if err != nil {
		return nil, err
	}
	st.encoded(start, len(src), len(f))
	return f, nil
}

// checkFrame checks that frame is exactly one frame of raw bytes of dt.
func checkFrame(frame []byte, raw int, dt dtype.DType) error {
	h, err := codec.PeekHeader(frame)
	if err != nil {
		return &CorruptError{Err: err}
	}
	if h.DType != dt || h.RawLen != raw || h.FrameLen != len(frame) {
		return corrupt("frame of %d %v bytes in a %d-byte message, want %d %v bytes", h.RawLen, h.DType, len(frame), raw, dt)
	}
	return nil
}

// decodeFrame decodes frame, which must be exactly one frame of dt holding
// len(dst) bytes, into dst.
func decodeFrame(co Coder, st *Stats, dst, frame []byte, dt dtype.DType) error {
	start := time.Now()
	if err := checkFrame(frame, len(dst), dt); err != nil {
		return err
	}
	if err := co.DecodeFrame(dst, frame, dt); err != nil {
		return err
	}
	st.decoded(start, len(dst))
	return nil
}
