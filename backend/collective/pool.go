package collective

import (
	"math/bits"
	"sync"
)

// Pool hands out scratch buffers by power-of-two size class and takes them
// back for reuse, so steady-state collectives do not allocate per segment.
// It is safe for concurrent use; the zero value is ready to use, and a nil
// *Pool simply allocates (Get) and drops (Put). Buffers are not zeroed.
//
// Each class is a sync.Pool, so idle buffers are released by the garbage
// collector instead of pinning the peak working set forever.
type Pool struct {
	classes [numClasses]sync.Pool
}

const (
	minClassShift = 10 // 1 KiB: smaller requests share the smallest class
	maxClassShift = 30 // 1 GiB: larger requests are allocated exactly, not pooled
	numClasses    = maxClassShift - minClassShift + 1
)

// NewPool returns an empty Pool.
func NewPool() *Pool { return new(Pool) }

// classOf returns the smallest class holding n bytes, or -1 if n is too
// large to pool.
func classOf(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	shift := bits.Len(uint(n - 1)) // 1<<shift >= n
	if shift > maxClassShift {
		return -1
	}
	return shift - minClassShift
}

// Get returns a buffer of length n (capacity may be larger). Its contents
// are unspecified.
func (p *Pool) Get(n int) []byte {
	if n <= 0 {
		return nil
	}
	c := classOf(n)
	if p == nil || c < 0 {
		return make([]byte, n)
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		return (*v)[:n]
	}
	return make([]byte, n, 1<<(c+minClassShift))
}

// Put returns b to the pool for reuse. The caller must not use b (or any
// slice of it) afterwards. Buffers that did not come from Get are accepted
// only when their capacity is exactly a class size; others are dropped.
func (p *Pool) Put(b []byte) {
	if p == nil || cap(b) < 1<<minClassShift {
		return
	}
	c := classOf(cap(b))
	if c < 0 || cap(b) != 1<<(c+minClassShift) {
		return
	}
	b = b[:cap(b)]
	p.classes[c].Put(&b)
}
