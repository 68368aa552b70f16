package reduce

import (
	"encoding/binary"
	"sync"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// The kernels view buffers as typed slices in host byte order. That needs
// element-aligned addresses (the race detector's checkptr rejects anything
// else, and some architectures fault) and a little-endian host. Buffers that
// fail either test go through small pooled, aligned buffers instead; this is
// slower but rare (torch allocates element-aligned storage).

// stageBytes is the size of each staging buffer.
const stageBytes = 4096

// hostBigEndian is true on big-endian hosts. Tests also set it to exercise
// the byte-swapping staging path on little-endian hosts.
var hostBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// stageBufs are two staging buffers, uint64s for 8-byte alignment. They come
// from a pool because the kernels are called through function values, which
// would make stack buffers escape (one allocation per call).
type stageBufs [2][stageBytes / 8]uint64

func (s *stageBufs) bytes(i int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[i])), stageBytes)
}

var stagePool = sync.Pool{New: func() any { return new(stageBufs) }}

// direct reports whether the kernels can work on the buffers in place.
func direct(size int, bufs ...[]byte) bool {
	if hostBigEndian {
		return false
	}
	for _, b := range bufs {
		if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) != 0 {
			return false
		}
	}
	return true
}

// staged3 runs a binary reduction chunk by chunk through aligned buffers.
// Reading both operands of a chunk before writing it keeps exact aliasing of
// dst with a or b safe.
func staged3(dt dtype.DType, op Op, dst, a, b []byte) {
	s := stagePool.Get().(*stageBufs)
	defer stagePool.Put(s)
	ba, bb := s.bytes(0), s.bytes(1)
	size := dt.Size()
	for off := 0; off < len(dst); off += stageBytes {
		n := min(stageBytes, len(dst)-off)
		x, y := ba[:n], bb[:n]
		copy(x, a[off:off+n])
		copy(y, b[off:off+n])
		if hostBigEndian {
			swapElems(x, size)
			swapElems(y, size)
		}
		combine(dt, op, x, x, y)
		if hostBigEndian {
			swapElems(x, size)
		}
		copy(dst[off:off+n], x)
	}
}

// staged1 is staged3 for the in-place unary kernels.
func staged1(dt dtype.DType, buf []byte, u unaryOp) {
	s := stagePool.Get().(*stageBufs)
	defer stagePool.Put(s)
	bs := s.bytes(0)
	size := dt.Size()
	for off := 0; off < len(buf); off += stageBytes {
		n := min(stageBytes, len(buf)-off)
		x := bs[:n]
		copy(x, buf[off:off+n])
		if hostBigEndian {
			swapElems(x, size)
		}
		applyUnary(dt, x, u)
		if hostBigEndian {
			swapElems(x, size)
		}
		copy(buf[off:off+n], x)
	}
}

// swapElems reverses the bytes of every size-byte element of b in place,
// converting between little-endian and big-endian element order.
func swapElems(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		e := b[i : i+size]
		for j, k := 0, size-1; j < k; j, k = j+1, k-1 {
			e[j], e[k] = e[k], e[j]
		}
	}
}
