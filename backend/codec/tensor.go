package codec

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Tensor container (docs/FORMAT.md): magic "ZCCT", version, dtype, ndim,
// reserved byte, ndim little-endian int64 dimensions, CRC-32C of all of
// that, then one frame holding the elements.
const (
	tensorFixed = 8
	maxDims     = 64
)

var tensorMagic = [4]byte{'Z', 'C', 'C', 'T'}

var (
	encPool = sync.Pool{New: func() any { return NewEncoder() }}
	decPool = sync.Pool{New: func() any { return NewDecoder() }}
)

func numelOf(shape []int64) (int, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > maxNumel {
			return 0, false
		}
		n = lo
	}
	return int(n), true
}

// EncodeTensor appends a tensor container (dtype, shape, then one frame of
// kind k) for src to dst. len(src) must equal the product of shape times
// dt.Size(). Safe for concurrent use.
func EncodeTensor(dst, src []byte, dt dtype.DType, shape []int64, k Kind) ([]byte, error) {
	dst, _, err := EncodeTensorThreads(dst, src, dt, shape, k, 1)
	return dst, err
}

// EncodeTensorThreads is EncodeTensor on up to threads goroutines
// (EncodeThreads: the same bytes for every thread count); it also returns
// the frame's kind.
func EncodeTensorThreads(dst, src []byte, dt dtype.DType, shape []int64, k Kind, threads int) ([]byte, Kind, error) {
	if !dt.Valid() {
		return dst, 0, fmt.Errorf("%w: %v", ErrDType, dt)
	}
	if len(shape) > maxDims {
		return dst, 0, fmt.Errorf("%w: %d dimensions (max %d)", ErrSize, len(shape), maxDims)
	}
	n, ok := numelOf(shape)
	if !ok || n*dt.Size() != len(src) {
		return dst, 0, fmt.Errorf("%w: shape %v of %v needs %d bytes, have %d", ErrSize, shape, dt, n*dt.Size(), len(src))
	}
	start := len(dst)
	dst = append(dst, tensorMagic[:]...)
	dst = append(dst, Version, byte(dt), byte(len(shape)), 0)
	for _, d := range shape {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(d))
	}
	dst = binary.LittleEndian.AppendUint32(dst, crc(dst[start:]))
	return EncodeThreads(dst, src, dt, k, threads)
}

// DecodeTensorHeader parses a tensor container's header and the header of
// its frame, returning the dtype, the shape and the decoded byte length.
func DecodeTensorHeader(src []byte) (dt dtype.DType, shape []int64, raw int, err error) {
	dt, shape, _, h, err := parseTensor(src)
	return dt, shape, h.RawLen, err
}

func parseTensor(src []byte) (dtype.DType, []int64, int, Header, error) {
	var h Header
	if len(src) < tensorFixed {
		return 0, nil, 0, h, fmt.Errorf("%w: tensor header", ErrTruncated)
	}
	if [4]byte(src[0:4]) != tensorMagic {
		return 0, nil, 0, h, fmt.Errorf("%w: bad tensor magic %q", ErrVersion, src[0:4])
	}
	if src[4] != Version {
		return 0, nil, 0, h, fmt.Errorf("%w: tensor version %d", ErrVersion, src[4])
	}
	dt := dtype.DType(src[5])
	nd := int(src[6])
	if nd > maxDims || src[7] != 0 {
		return 0, nil, 0, h, fmt.Errorf("%w: tensor header (ndim %d)", ErrCorrupt, nd)
	}
	hl := tensorFixed + 8*nd
	if len(src) < hl+4 {
		return 0, nil, 0, h, fmt.Errorf("%w: tensor header", ErrTruncated)
	}
	if got, want := binary.LittleEndian.Uint32(src[hl:]), crc(src[:hl]); got != want {
		return 0, nil, 0, h, fmt.Errorf("%w: tensor header crc %08x, want %08x", ErrChecksum, got, want)
	}
	if !dt.Valid() {
		return 0, nil, 0, h, fmt.Errorf("%w: %v", ErrDType, dt)
	}
	shape := make([]int64, nd)
	for i := range shape {
		shape[i] = int64(binary.LittleEndian.Uint64(src[tensorFixed+8*i:]))
	}
	n, ok := numelOf(shape)
	if !ok {
		return 0, nil, 0, h, fmt.Errorf("%w: shape %v", ErrCorrupt, shape)
	}
	h, err := PeekHeader(src[hl+4:])
	if err != nil {
		return 0, nil, 0, h, err
	}
	if h.DType != dt || h.Numel != n {
		return 0, nil, 0, h, fmt.Errorf("%w: frame holds %d %v, shape says %d %v", ErrCorrupt, h.Numel, h.DType, n, dt)
	}
	return dt, shape, hl + 4, h, nil
}

// DecodeTensor decodes a tensor container into dst, whose length must equal
// the raw length reported by DecodeTensorHeader. Trailing bytes after the
// frame are an error. Safe for concurrent use.
func DecodeTensor(dst, src []byte) error { return DecodeTensorThreads(dst, src, 1) }

// DecodeTensorThreads is DecodeTensor on up to threads goroutines
// (DecodeThreads).
func DecodeTensorThreads(dst, src []byte, threads int) error {
	_, _, off, h, err := parseTensor(src)
	if err != nil {
		return err
	}
	if len(src)-off < h.FrameLen {
		return fmt.Errorf("%w: container has %d frame bytes, frame needs %d", ErrTruncated, len(src)-off, h.FrameLen)
	}
	if len(src)-off > h.FrameLen {
		return fmt.Errorf("%w: %d bytes after the frame", ErrCorrupt, len(src)-off-h.FrameLen)
	}
	_, err = DecodeThreads(dst, src[off:], threads)
	return err
}
