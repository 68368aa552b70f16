package gpu

import (
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zipccl/zipccl/backend/zlog"
)

// Device is the engine's own use of one CUDA device, for the path that
// codes on the GPU and moves frames through zipccl's transport (PathCoded):
// streams of its own, device scratch and page-locked host buffers, each kept
// and reused for the life of the process. Nothing here is ever freed while
// the process runs, so no engine call can wait on the device as a whole
// (cudaFree and cudaFreeHost synchronize the device).
type Device struct {
	k   *Kernels
	dev int

	smu     sync.Mutex
	streams []uintptr // idle

	dmem *memPool // device memory
	hmem *memPool // page-locked host memory

	encodes, decodes, folds atomic.Int64 // segments the kernels coded, for tests and stats
}

// Counts is how many segments the GPU encoded, decoded and folded for the
// coded path so far.
func (d *Device) Counts() (encodes, decodes, folds int64) {
	return d.encodes.Load(), d.decodes.Load(), d.folds.Load()
}

func newDevice(k *Kernels, dev int) *Device {
	return &Device{k: k, dev: dev,
		dmem: newMemPool(func(n int64) (uintptr, error) { return k.Malloc(dev, n) }),
		hmem: newMemPool(func(n int64) (uintptr, error) { return k.HostAlloc(dev, n) }),
	}
}

// Device returns the process's Device for CUDA device index dev (loading
// the kernel library on first use).
func (e *Env) Device(dev int) (*Device, error) {
	k, err := e.Kernels()
	if err != nil {
		return nil, err
	}
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if d := e.devices[dev]; d != nil {
		return d, nil
	}
	if e.devices == nil {
		e.devices = map[int]*Device{}
	}
	d := newDevice(k, dev)
	e.devices[dev] = d
	return d, nil
}

// DeviceFor is the process's Device (package comm's entry point).
func DeviceFor(env *Env, dev int) (*Device, error) {
	if env == nil {
		env = defaultEnv
	}
	return env.Device(dev)
}

// stream lends a stream of the engine's own (non-blocking: the caller's
// legacy default stream never waits for it, nor it for that stream).
func (d *Device) stream() (uintptr, error) {
	d.smu.Lock()
	if n := len(d.streams); n > 0 {
		s := d.streams[n-1]
		d.streams = d.streams[:n-1]
		d.smu.Unlock()
		return s, nil
	}
	d.smu.Unlock()
	return d.k.StreamCreate(d.dev)
}

// putStream takes back an idle stream (its work finished).
func (d *Device) putStream(s uintptr) {
	d.smu.Lock()
	d.streams = append(d.streams, s)
	d.smu.Unlock()
}

// run lends a stream to f, then waits for the stream.
func (d *Device) run(f func(st uintptr) error) error {
	st, err := d.stream()
	if err != nil {
		return err
	}
	err = f(st)
	if serr := d.k.Sync(d.dev, st); err == nil {
		err = serr
	}
	d.putStream(st)
	return err
}

// view is n bytes at address p as a slice, for memory Go does not own
// (device memory is never dereferenced through it).
func view(p uintptr, n int) []byte {
	if n == 0 || p == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}

// ptr is the address of b's first byte (0 for an empty slice).
func ptr(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// HostBuf returns n bytes of page-locked host memory (capacity: its size
// class), or Go memory when page-locked memory cannot be had (copies are
// then slower, never wrong). PutHostBuf takes it back.
func (d *Device) HostBuf(n int) []byte {
	if n <= 0 {
		return nil
	}
	p, c, err := d.hmem.get(int64(n))
	if err != nil {
		hostFallback.Do(func() {
			zlog.Process.Warnf("page-locked host memory is unavailable (%v): GPU copies go through pageable memory, slower", err)
		})
		return make([]byte, n)
	}
	return view(p, int(c))[:n]
}

var hostFallback sync.Once

// PutHostBuf takes back a buffer from HostBuf (or a prefix of one); others
// are dropped.
func (d *Device) PutHostBuf(b []byte) { d.hmem.put(ptr(b)) }

// scratch returns n bytes of device memory; putScratch takes it back.
func (d *Device) scratch(n int64) (uintptr, error) {
	p, _, err := d.dmem.get(n)
	return p, err
}

func (d *Device) putScratch(p uintptr) { d.dmem.put(p) }

// memPool hands out blocks by power-of-two size class, from 4 KiB, and takes
// them back for reuse; blocks are never released.
type memPool struct {
	alloc func(n int64) (uintptr, error)
	mu    sync.Mutex
	free  map[int][]uintptr
	class map[uintptr]int // every block it made
}

const minPoolShift = 12

func newMemPool(alloc func(n int64) (uintptr, error)) *memPool {
	return &memPool{alloc: alloc, free: map[int][]uintptr{}, class: map[uintptr]int{}}
}

func poolClass(n int64) int {
	if n <= 1<<minPoolShift {
		return minPoolShift
	}
	return bits.Len64(uint64(n - 1))
}

func (m *memPool) get(n int64) (uintptr, int64, error) {
	if n < 0 {
		return 0, 0, errors.New("negative size")
	}
	c := poolClass(n)
	m.mu.Lock()
	if l := m.free[c]; len(l) > 0 {
		p := l[len(l)-1]
		m.free[c] = l[:len(l)-1]
		m.mu.Unlock()
		return p, 1 << c, nil
	}
	m.mu.Unlock()
	p, err := m.alloc(1 << c)
	if err != nil {
		return 0, 0, err
	}
	m.mu.Lock()
	m.class[p] = c
	m.mu.Unlock()
	return p, 1 << c, nil
}

func (m *memPool) put(p uintptr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.class[p]; ok {
		m.free[c] = append(m.free[c], p)
	}
}
