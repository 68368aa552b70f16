package zcoll

import (
	"fmt"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Coder codes segments of an operation's buffers into messages and decodes
// messages into them. The messages (frames, split parts) are the same bytes
// whoever codes them, so ranks with different coders interoperate: that is
// what lets a rank code CUDA tensors on its GPU while its peers code on the
// CPU. Args.Coder nil is HostCoder over Args.Pool.
type Coder interface {
	// Msg returns a host buffer of n bytes (contents unspecified) for a
	// message; PutMsg takes back a buffer from Msg, EncodeFrame or
	// EncodeSplit (or a prefix of one).
	Msg(n int) []byte
	PutMsg(b []byte)
	// EncodeFrame codes seg (whole elements of dt) as one frame with the
	// concrete kind k, byte for byte what codec.Encoder.Encode writes
	// (including its raw fallback), in a Msg buffer.
	EncodeFrame(seg []byte, dt dtype.DType, k codec.Kind) ([]byte, error)
	// EncodeSplit codes seg in split mode with the concrete kind k: the
	// static part (codec's EncodeStatic bytes) in a Msg buffer, and a
	// function returning the dynamic part (EncodeDynamic's bytes) in a Msg
	// buffer with room for trailerLen more bytes. The caller sends the
	// static part before it calls dynamic.
	EncodeSplit(seg []byte, dt dtype.DType, k codec.Kind) (static []byte, dynamic func() ([]byte, error), err error)
	// DecodeFrame decodes frame, whose header was checked to describe
	// len(dst) bytes of dt, into dst. A frame that does not decode is a
	// *CorruptError.
	DecodeFrame(dst, frame []byte, dt dtype.DType) error
	// DecodeSplit decodes split parts of the concrete kind k (the static
	// part's length checked, the trailer removed) into dst; a *CorruptError
	// when they do not decode.
	DecodeSplit(dst, static, dynamic []byte, dt dtype.DType, k codec.Kind) error
}

// DeviceMemory is a Coder for buffers the host cannot read (CUDA device
// memory): zcoll then never touches In, Out or its scratch itself. It
// refuses plain mode and codec.Auto (both read the data on the host), and
// folds a reduce-scatter's contributions a whole segment at a time.
type DeviceMemory interface {
	Coder
	// Copy copies src into dst (equal lengths; they do not overlap).
	Copy(dst, src []byte) error
	// Scratch returns n bytes of the same memory for a decoded segment;
	// PutScratch takes it back.
	Scratch(n int) ([]byte, error)
	PutScratch(b []byte)
	// Fold decodes srcs and writes srcs[0] op srcs[1] op ... op
	// srcs[len-1] into dst in one pass, with the arithmetic of the package
	// documentation (float32 accumulation and one rounding for the narrow
	// float types, rank order). dst may be a Plain source exactly.
	Fold(dt dtype.DType, op int, dst []byte, srcs []FoldSource) error
}

// FoldSource is one rank's contribution to a device fold: its elements
// (Plain, device memory), or a message as received (host memory), checked
// to describe the segment: one frame, or split parts of kind Kind.
type FoldSource struct {
	Plain           []byte
	Frame           []byte
	Static, Dynamic []byte // split parts (Dynamic without its trailer)
	Kind            codec.Kind
}

// msgs are the host buffers s holds (to give back to the coder).
func (s *FoldSource) msgs() [][]byte { return [][]byte{s.Frame, s.Static, s.Dynamic} }

// HostCoder codes host memory with package codec, its messages and scratch
// from pool (nil allocates).
func HostCoder(pool *collective.Pool) Coder { return hostCoder{pool} }

type hostCoder struct{ pool *collective.Pool }

func (h hostCoder) Msg(n int) []byte { return h.pool.Get(n) }
func (h hostCoder) PutMsg(b []byte)  { h.pool.Put(b) }

func (h hostCoder) EncodeFrame(seg []byte, dt dtype.DType, k codec.Kind) ([]byte, error) {
	buf := h.pool.Get(frameCap(len(seg), dt, k))[:0]
	e := encoders.Get().(*codec.Encoder)
	f, err := e.Encode(buf, seg, dt, k)
	encoders.Put(e)
	if err != nil {
		h.pool.Put(buf)
		return nil, fmt.Errorf("zcoll: encoding: %w", err)
	}
	if cap(f) != cap(buf) {
		reallocs.Add(1)
	}
	return f, nil
}

func (h hostCoder) EncodeSplit(seg []byte, dt dtype.DType, k codec.Kind) ([]byte, func() ([]byte, error), error) {
	numel := len(seg) / dt.Size()
	e := encoders.Get().(*codec.Encoder)
	sb := h.pool.Get(codec.StaticLen(numel, dt, k) + 64)[:0]
	s, err := e.EncodeStatic(sb, seg, dt, k)
	if err != nil {
		encoders.Put(e)
		h.pool.Put(sb)
		return nil, nil, err
	}
	return s, func() ([]byte, error) {
		db := h.pool.Get(dynamicEncCap(numel, dt, k))[:0]
		d, err := e.EncodeDynamic(db)
		encoders.Put(e)
		if err != nil {
			h.pool.Put(db)
			return nil, err
		}
		if cap(s) != cap(sb) || cap(d) != cap(db) {
			reallocs.Add(1)
		}
		return d, nil
	}, nil
}

func (h hostCoder) DecodeFrame(dst, frame []byte, _ dtype.DType) error {
	d := decoders.Get().(*codec.Decoder)
	_, err := d.Decode(dst, frame)
	decoders.Put(d)
	if err != nil {
		return &CorruptError{Err: err}
	}
	return nil
}

func (h hostCoder) DecodeSplit(dst, static, dynamic []byte, dt dtype.DType, k codec.Kind) error {
	d := decoders.Get().(*codec.Decoder)
	err := d.DecodeSplit(dst, static, dynamic, dt, k)
	decoders.Put(d)
	if err != nil {
		return &CorruptError{Err: err}
	}
	return nil
}
