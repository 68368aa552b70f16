// Package bufs holds the buffer arithmetic and argument checks that the
// algorithm packages (collective, zcoll) share: how a buffer is cut into
// per-rank blocks, memory identity and overlap, and the validation of a
// reduction's dtype, op and lengths. Errors carry no package prefix; the
// callers add theirs.
package bufs

import (
	"fmt"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
)

// CeilDiv is a/b rounded up, for positive b.
func CeilDiv(a, b int) int { return (a + b - 1) / b }

// Split cuts buf into n consecutive blocks of whole elements of size gran.
// Block i gets numel/n elements, and the first numel%n blocks one more, so
// blocks may be empty when numel < n. The layout depends only on (len, n,
// gran), so every rank computes the same one.
func Split(buf []byte, n, gran int) [][]byte {
	numel := len(buf) / gran
	q, r := numel/n, numel%n
	out := make([][]byte, n)
	off := 0
	for i := range out {
		cnt := q
		if i < r {
			cnt++
		}
		end := off + cnt*gran
		out[i] = buf[off:end:end]
		off = end
	}
	return out
}

// Same reports whether a and b are the same memory (or both empty).
func Same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// Overlaps reports whether a and b share any byte of memory.
func Overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// CheckReduce validates a reduction's dtype and op and that every length is
// a whole number of elements, and returns the element size. AVG and
// PREMUL_SUM are rejected: the engine turns them into SUM (plus a local
// scaling) before calling, so seeing one here is a caller bug that would
// otherwise silently produce a plain sum.
func CheckReduce(dt dtype.DType, op reduce.Op, lens ...int) (int, error) {
	if op == reduce.Avg || op == reduce.PreMulSum {
		return 0, fmt.Errorf("reduce op %v must be resolved by the engine", op)
	}
	if err := reduce.Check(dt, op); err != nil {
		return 0, err
	}
	es := dt.Size()
	for _, l := range lens {
		if l%es != 0 {
			return 0, fmt.Errorf("buffer of %d bytes is not a whole number of %s elements", l, dt)
		}
	}
	return es, nil
}

// Need checks a buffer count.
func Need(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s has %d buffers, want %d", what, got, want)
	}
	return nil
}

// Float32s is b's float32 elements (the host's byte order, little-endian
// on every platform zipccl builds for), read-only: b itself when it is
// 4-byte aligned, else a copy.
func Float32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%4 == 0 {
		return unsafe.Slice((*float32)(p), len(b)/4)
	}
	out := make([]float32, len(b)/4)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out)), b)
	return out
}

// Float32Bytes is the memory of s as bytes.
func Float32Bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// Pick returns bs[r] for every index r of rs.
func Pick(bs [][]byte, rs []int) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = bs[r]
	}
	return out
}
