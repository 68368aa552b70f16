package reduce

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// specials are interesting bit patterns per element size; random bits fill
// the rest (for floats they include NaNs, infinities and subnormals).
var specials = map[int][]uint64{
	1: {0x00, 0x80, 0x01, 0x81, 0x7F, 0xFF, 0x7E, 0xFE, 0x7C, 0xFC, 0x7D, 0x38, 0xB8, 0x40, 0x3C},
	2: {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0xFE00,
		0x7E00, 0x7DFF, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x007F, 0x0080, 0x3C00, 0x3F80, 0x7F7F, 0xFFFF},
	4: {0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
		0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FBFFFFF, 0x3F800000, 0xBF800000,
		0x3F808000, 0x3F818000, 0x477FF000, 0x33000000, 0x80000001, 0xFFFFFFFF, 0x7FFFFFFF},
	8: {0, 1 << 63, 1, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x7FF0000000000000, 0xFFF0000000000000,
		0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF7FFFFFFFFFFFF, 0x3FF0000000000000,
		0xBFF0000000000000, 0x8000000000000001, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF},
}

// fill writes n elements of dt: random bit patterns (for floats these
// include NaNs, infinities and subnormals), with about one element in eight
// replaced by a special value and, for floats, about one in three by an
// "ordinary" value of moderate magnitude whose sums and products round.
func fill(rng *rand.Rand, dt dtype.DType, n int) []byte {
	size := dt.Size()
	b := make([]byte, n*size)
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(rng.Uint32())
	}
	rand.NewChaCha8(seed).Read(b) // bulk random bits: cheap even under -race
	sp := specials[size]
	for i := rng.IntN(3); i < n; i += 1 + rng.IntN(3) {
		if rng.IntN(3) == 0 || !dt.IsFloat() {
			store(b, size, i, sp[rng.IntN(len(sp))])
		} else {
			store(b, size, i, ordinary(rng, dt))
		}
	}
	return b
}

func ordinary(rng *rand.Rand, dt dtype.DType) uint64 {
	f := (rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(16)-8)
	switch dt {
	case dtype.Float64:
		return math.Float64bits(f)
	case dtype.Float32:
		return uint64(math.Float32bits(float32(f)))
	}
	return narrow32(dt, float32(f))
}

// atLevels runs f at every SIMD level this machine can run, restoring the
// default level afterwards.
func atLevels(t *testing.T, f func(t *testing.T, l level)) {
	t.Helper()
	defer func() { curLevel = bestLevel }()
	for l := levelGeneric; l <= maxLevel; l++ {
		curLevel = l
		t.Run(levelNames[l], func(t *testing.T) { f(t, l) })
	}
}

// expect computes the reference result of a op b.
func expect(dt dtype.DType, op Op, a, b []byte) []byte {
	size := dt.Size()
	out := make([]byte, len(a))
	for i := range len(a) / size {
		store(out, size, i, refCombine(dt, op, load(a, size, i), load(b, size, i)))
	}
	return out
}

// diff reports the first mismatching element, or -1.
func diff(dt dtype.DType, got, want []byte) int {
	size := dt.Size()
	for i := range len(want) / size {
		g, w := load(got, size, i), load(want, size, i)
		if g != w && !(nanLoose(dt) && isNaNBits(dt, g) && isNaNBits(dt, w)) {
			return i
		}
	}
	return -1
}

func checkEqual(t *testing.T, what string, dt dtype.DType, got, want, a, b []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if i := diff(dt, got, want); i >= 0 {
		size := dt.Size()
		t.Fatalf("%s: element %d of %d: got %#x, want %#x (a=%#x b=%#x)", what, i, len(want)/size,
			load(got, size, i), load(want, size, i), load(a, size, i), load(b, size, i))
	}
}

// offset returns a copy of b placed at byte offset off of a fresh 8-byte
// aligned buffer, to produce misaligned slices.
func offset(b []byte, off int) []byte {
	words := make([]uint64, (len(b)+off+7)/8)
	c := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[off : off+len(b)]
	copy(c, b)
	return c
}

func aligned(b []byte, size int) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0
}
