// Package codec is zipccl's lossless (bit-exact) float codec: it shrinks
// tensors before they go on the wire by coding the exponents of their
// elements. Three formats share one framing:
//
//   - Zip3: ZipCCL's fixed 3-bit exponent code (window of seven exponents
//     picked from the block's sigma, code 0 = escape); fastest.
//   - Huff: per-block canonical Huffman code of the exponent bytes.
//   - Huff2: Huff with exact tables that also codes the bytes under the
//     exponent where that saves 5 %; the best ratio, not used by collectives.
//   - Huff2Packed: Huff2's records in a frame without alignment (a 4-byte
//     index entry per block, no padding, 16-bit stream lengths): the
//     stored tensors' kind, whole frames only.
//   - Raw: the bytes as they are.
//
// and Auto picks one per tensor from a cheap estimate. Every frame is
// self-describing (dtype, element count, kind), split into independent
// blocks, each guarded by a CRC-32C of its original bytes. A frame is a
// header, a static part whose length depends on (numel, dtype, kind) only,
// and a dynamic part (escapes or coded exponents); the two can also be
// produced and shipped separately (split mode). The wire format is
// specified in docs/FORMAT.md.
//
// Whole frames:
//
//	var e codec.Encoder                   // reusable, one goroutine at a time
//	frame, err := e.Encode(buf[:0], src, dtype.BFloat16, codec.Auto)
//	h, err := codec.PeekHeader(frame)     // dtype, kind, RawLen, FrameLen
//	var d codec.Decoder
//	n, err := d.Decode(dst[:h.RawLen], frame)
//
// Split mode (UCCL-Zip split-send, ZipCCL all-to-all design 2): the static
// part has a length known from (numel, dtype, kind) alone and is produced
// first; the dynamic part follows; the receiver decodes once it has both:
//
//	st, _ := e.EncodeStatic(nil, src, dt, codec.Zip3)   // len == StaticLen(numel, dt, Zip3)
//	dyn, _ := e.EncodeDynamic(nil)
//	err := d.DecodeSplit(dst, st, dyn, dt, e.Kind())
//
// EncodeTensor/DecodeTensor wrap one frame with a dtype+shape header for the
// Python API; EstimateRatio and ChooseKind give cheap sampled estimates for
// the adaptive switcher. SIMD kernels (AVX-512, AVX2, BMI2, VPCLMULQDQ) are
// picked at run time; the portable Go code produces the same bytes.
package codec

import (
	"errors"
	"fmt"
	"strings"
)

// Kind selects a coding format.
type Kind uint8

const (
	Raw  Kind = 0 // pass-through
	Zip3 Kind = 1 // fixed 3-bit exponent code with escapes
	Huff Kind = 2 // per-block Huffman-coded exponents
	// Huff2: per-block Huffman code of every byte plane (exponent, then the
	// bytes under it) where it pays; the best ratio, CPU only. Auto never
	// picks it.
	Huff2 Kind = 3
	// Huff2Packed: Huff2's planes and records, packed (docs/FORMAT.md 4b):
	// 4-byte index entries, 16-bit stream lengths, no padding. Whole frames
	// only (no split mode); what zipccl.codec and checkpoints write.
	Huff2Packed Kind = 4
	Auto        Kind = 255 // a request only: pick Raw, Zip3 or Huff per tensor
)

func (k Kind) String() string {
	switch k {
	case Raw:
		return "raw"
	case Zip3:
		return "zip3"
	case Huff:
		return "huff"
	case Huff2:
		return "huff2"
	case Huff2Packed:
		return "huff2p"
	case Auto:
		return "auto"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind parses "raw", "zip3", "huff", "huff2", "huff2p" or "auto"
// (case-insensitive).
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "raw":
		return Raw, nil
	case "zip3":
		return Zip3, nil
	case "huff":
		return Huff, nil
	case "huff2":
		return Huff2, nil
	case "huff2p":
		return Huff2Packed, nil
	case "auto":
		return Auto, nil
	}
	return 0, fmt.Errorf("%w: %q (want raw, zip3, huff, huff2, huff2p or auto)", ErrKind, s)
}

// Errors. Every error returned by this package wraps one of these.
var (
	ErrCorrupt   = errors.New("codec: corrupt data")        // malformed frame or part
	ErrTruncated = errors.New("codec: truncated data")      // input ends early
	ErrChecksum  = errors.New("codec: checksum mismatch")   // a CRC-32C did not match
	ErrVersion   = errors.New("codec: unsupported version") // unknown magic or version
	ErrDType     = errors.New("codec: unsupported dtype")   // invalid dtype
	ErrKind      = errors.New("codec: invalid kind")        // unknown kind, or Auto where a concrete kind is needed
	ErrSize      = errors.New("codec: size mismatch")       // dst or src length does not fit the request
	ErrState     = errors.New("codec: EncodeDynamic without EncodeStatic")
)
