package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zipccl/zipccl/backend/codec/huff"
	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Frame constants (docs/FORMAT.md).
const (
	HeaderLen  = 32 // frame header bytes
	Version    = 1  // format version written and accepted
	IndexEntry = 16 // bytes per block in the block index
	Align      = 128

	packedEntry = 4 // a packed frame's index entry: the CRC alone

	zip3BlockLog  = 14 // 16384 elements per zip3 block
	huffBlockLog  = 16 // 65536 elements per huff block
	huff2BlockLog = 16 // 65536 elements per huff2 block
	rawBlockLog   = 16 // 65536 elements per raw block

	// maxNumel bounds the element count so that every length fits an int64.
	maxNumel = 1 << 56
)

var magic = [4]byte{'Z', 'C', 'C', 'F'}

func crc(b []byte) uint32 { return crc32c.Checksum(b) }

func alignUp(n int) int { return (n + Align - 1) &^ (Align - 1) }

// zformat maps a dtype to its exponent layout; ok is false for dtypes that
// are carried raw.
func zformat(dt dtype.DType) (zip3.Format, bool) {
	switch dt {
	case dtype.BFloat16:
		return zip3.BF16, true
	case dtype.Float32:
		return zip3.FP32, true
	case dtype.Float16:
		return zip3.FP16, true
	case dtype.Float8E5M2:
		return zip3.E5M2, true
	case dtype.Float8E4M3FN:
		return zip3.E4M3, true
	}
	return 0, false
}

// EffectiveKind returns the kind a frame for dt actually uses when k is
// requested: dtypes without a coded format (integers, bool, float64) are
// always Raw. Auto is returned unchanged for coded dtypes.
func EffectiveKind(dt dtype.DType, k Kind) Kind {
	if _, ok := zformat(dt); !ok {
		return Raw
	}
	return k
}

// plan describes the static layout of numel elements of dt coded as kind.
type plan struct {
	dt        dtype.DType
	f         zip3.Format
	kind      Kind
	size      int
	numel     int
	blockLog  uint
	nblocks   int
	entry     int // index entry bytes
	indexLen  int
	fullLen   int // static bytes of a full block
	tailLen   int // static bytes of the last block
	staticLen int
}

func blockLogOf(k Kind) uint {
	switch k {
	case Zip3:
		return zip3BlockLog
	case Huff:
		return huffBlockLog
	case Huff2, Huff2Packed:
		return huff2BlockLog
	}
	return rawBlockLog
}

// huffStatic is the residue bytes of a huff block of n elements.
func huffStatic(f zip3.Format, n int) int {
	np := (n + 127) &^ 127
	switch f {
	case zip3.BF16, zip3.FP16:
		return np
	case zip3.FP32:
		return 3 * np
	}
	return 0
}

func (p *plan) blockStatic(n int) int {
	switch p.kind {
	case Zip3:
		return zip3.StaticLen(p.f, n)
	case Huff:
		return huffStatic(p.f, n)
	case Huff2, Huff2Packed:
		return 0 // every plane is in the dynamic part
	}
	return alignUp(n * p.size)
}

func newPlan(numel int, dt dtype.DType, k Kind) (plan, error) {
	if !dt.Valid() {
		return plan{}, fmt.Errorf("%w: %v", ErrDType, dt)
	}
	if k != Raw && k != Zip3 && k != Huff && k != Huff2 && k != Huff2Packed {
		return plan{}, fmt.Errorf("%w: %v", ErrKind, k)
	}
	if numel < 0 || numel > maxNumel {
		return plan{}, fmt.Errorf("%w: element count %d", ErrSize, numel)
	}
	p := plan{dt: dt, size: dt.Size(), numel: numel, kind: EffectiveKind(dt, k)}
	p.f, _ = zformat(dt)
	p.blockLog = blockLogOf(p.kind)
	b := 1 << p.blockLog
	p.nblocks = (numel + b - 1) >> p.blockLog
	p.entry, p.indexLen = IndexEntry, alignUp(IndexEntry*p.nblocks)
	if p.packed() {
		p.entry, p.indexLen = packedEntry, packedEntry*p.nblocks
	}
	if p.nblocks > 0 {
		p.fullLen = p.blockStatic(b)
		p.tailLen = p.blockStatic(numel - (p.nblocks-1)*b)
		p.staticLen = p.indexLen + (p.nblocks-1)*p.fullLen + p.tailLen
	}
	return p, nil
}

// packed: the frame has no alignment padding, 4-byte index entries and
// 16-bit stream lengths.
func (p *plan) packed() bool { return p.kind == Huff2Packed }

// huff2 is true for both layouts of huff2's records.
func (p *plan) huff2() bool { return p.kind == Huff2 || p.kind == Huff2Packed }

// lens is the width of the stream lengths in p's Huffman records.
func (p *plan) lens() huff.Lens {
	if p.packed() {
		return huff.Lens16
	}
	return huff.Lens32
}

// index is block i's index entry in the static part st.
func (p *plan) index(st []byte, i int) []byte { return st[p.entry*i : p.entry*(i+1)] }

// block returns the element range and static byte range of block i.
func (p *plan) block(i int) (e0, n, s0, sl int) {
	b := 1 << p.blockLog
	e0 = i * b
	n = min(b, p.numel-e0)
	s0 = p.indexLen + i*p.fullLen
	sl = p.fullLen
	if i == p.nblocks-1 {
		sl = p.tailLen
	}
	return
}

// StaticLen returns the length of the static part of numel elements of dt
// coded as k; it depends on nothing else. It is a multiple of 128 but for
// Huff2Packed (4 bytes a block). It returns
// -1 for Auto, an invalid dtype or kind, or a negative or huge numel.
func StaticLen(numel int, dt dtype.DType, k Kind) int {
	p, err := newPlan(numel, dt, k)
	if err != nil {
		return -1
	}
	return p.staticLen
}

// MaxDynamicLen bounds the dynamic part of numel elements of dt coded as k
// (split mode). Zip3's worst case is one escape byte per element; Huff's is
// the raw exponent bytes plus one mode byte per block; Huff2's every byte
// raw plus one mode byte per plane and block (unpadded for Huff2Packed).
func MaxDynamicLen(numel int, dt dtype.DType, k Kind) int {
	p, err := newPlan(numel, dt, k)
	if err != nil {
		return -1
	}
	switch p.kind {
	case Zip3:
		return alignUp(numel)
	case Huff:
		return alignUp(numel + 2*p.nblocks)
	case Huff2:
		return alignUp(numel*p.size + huff2Planes(p.f)*p.nblocks)
	case Huff2Packed:
		return numel*p.size + huff2Planes(p.f)*p.nblocks
	}
	return 0
}

// MaxEncodedLen returns the largest frame Encode can produce for nbytes of
// dt, header included: the raw frame, which every other kind falls back to
// when it would be larger.
func MaxEncodedLen(nbytes int, dt dtype.DType) int {
	if !dt.Valid() || nbytes < 0 {
		return -1
	}
	numel := (nbytes + dt.Size() - 1) / dt.Size()
	p, err := newPlan(numel, dt, Raw)
	if err != nil {
		return -1
	}
	return HeaderLen + p.staticLen
}

// Header is the parsed frame header.
type Header struct {
	Version    uint8
	DType      dtype.DType
	Kind       Kind // Raw, Zip3, Huff, Huff2 or Huff2Packed
	BlockLog   uint8
	Numel      int // elements
	RawLen     int // Numel * DType.Size(): the decoded length
	StaticLen  int
	DynamicLen int
	FrameLen   int // HeaderLen + StaticLen + DynamicLen
}

func putHeader(b []byte, p *plan, dyn int) {
	copy(b[0:4], magic[:])
	b[4] = Version
	b[5] = byte(p.kind)
	b[6] = byte(p.dt)
	b[7] = byte(p.blockLog)
	binary.LittleEndian.PutUint64(b[8:], uint64(p.numel))
	binary.LittleEndian.PutUint64(b[16:], uint64(dyn))
	binary.LittleEndian.PutUint32(b[24:], 0)
	binary.LittleEndian.PutUint32(b[28:], crc(b[:28]))
}

// PeekHeader parses and checks the frame header at the start of src without
// decoding anything. It does not require the whole frame to be present.
func PeekHeader(src []byte) (Header, error) {
	h, _, err := parseHeader(src)
	return h, err
}

func parseHeader(src []byte) (Header, plan, error) {
	var h Header
	if len(src) < HeaderLen {
		return h, plan{}, fmt.Errorf("%w: %d bytes, frame header needs %d", ErrTruncated, len(src), HeaderLen)
	}
	if [4]byte(src[0:4]) != magic {
		return h, plan{}, fmt.Errorf("%w: bad magic %q", ErrVersion, src[0:4])
	}
	if src[4] != Version {
		return h, plan{}, fmt.Errorf("%w: version %d", ErrVersion, src[4])
	}
	if got, want := binary.LittleEndian.Uint32(src[28:]), crc(src[:28]); got != want {
		return h, plan{}, fmt.Errorf("%w: frame header crc %08x, want %08x", ErrChecksum, got, want)
	}
	h.Version = src[4]
	h.Kind = Kind(src[5])
	h.DType = dtype.DType(src[6])
	h.BlockLog = src[7]
	if binary.LittleEndian.Uint32(src[24:]) != 0 {
		return h, plan{}, fmt.Errorf("%w: reserved header bytes", ErrCorrupt)
	}
	numel := binary.LittleEndian.Uint64(src[8:])
	dyn := binary.LittleEndian.Uint64(src[16:])
	if numel > maxNumel {
		return h, plan{}, fmt.Errorf("%w: element count %d", ErrCorrupt, numel)
	}
	p, err := newPlan(int(numel), h.DType, h.Kind)
	if err != nil {
		return h, plan{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if p.kind != h.Kind || uint(h.BlockLog) != p.blockLog {
		return h, plan{}, fmt.Errorf("%w: kind %v / block log %d not valid for %v", ErrCorrupt, h.Kind, h.BlockLog, h.DType)
	}
	if dyn > math.MaxInt64/4 || (dyn%Align != 0 && !p.packed()) || (p.kind == Raw && dyn != 0) {
		return h, plan{}, fmt.Errorf("%w: dynamic length %d", ErrCorrupt, dyn)
	}
	h.Numel = p.numel
	h.RawLen = p.numel * p.size
	h.StaticLen = p.staticLen
	h.DynamicLen = int(dyn)
	h.FrameLen = HeaderLen + p.staticLen + int(dyn)
	return h, p, nil
}
