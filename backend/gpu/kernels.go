package gpu

/*
#cgo CFLAGS: -I${SRCDIR} -I${SRCDIR}/../../cuda
#cgo LDFLAGS: -ldl
#include <zc_dl.h>
#include <stdlib.h>
#include <string.h>
#include <zipccl_cuda.h>

static int zk_int(void* f) { return ((int (*)(void))f)(); }
static const char* zk_str(void* f) { return ((const char* (*)(void))f)(); }
static const char* zk_status_string(void* f, int s) { return ((const char* (*)(int))f)(s); }
static int zk_ctx_create(void* f, int dev, zccl_ctx** out) { return ((zccl_status (*)(int, zccl_ctx**))f)(dev, out); }
static void zk_ctx_destroy(void* f, zccl_ctx* c) { ((void (*)(zccl_ctx*))f)(c); }
static int64_t zk_len(void* f, int dt, int64_t n) { return ((int64_t (*)(int, int64_t))f)(dt, n); }
static int zk_slots(void* f, int dt, const int64_t* counts, int n, int64_t* offs) {
	return ((zccl_status (*)(int, const int64_t*, int, int64_t*))f)(dt, counts, n, offs);
}
static int64_t zk_ws(void* f, int dt, const int64_t* counts, int n) {
	return ((int64_t (*)(int, const int64_t*, int))f)(dt, counts, n);
}
static int64_t zk_rws(void* f, int dt, int64_t numel, int nsrc) {
	return ((int64_t (*)(int, int64_t, int))f)(dt, numel, nsrc);
}
static int zk_encode(void* f, zccl_ctx* c, int dt, uintptr_t src, const int64_t* counts, int n, uintptr_t out,
                     const int64_t* offs, uintptr_t lens, uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, const int64_t*, int, void*, const int64_t*, int64_t*, void*,
	                         int64_t, zccl_stream_t, unsigned))f)(c, dt, (const void*)src, counts, n, (void*)out, offs,
	                                                              (int64_t*)lens, (void*)ws, wsn, (zccl_stream_t)st, 0);
}
static int zk_decode(void* f, zccl_ctx* c, int dt, uintptr_t in, const int64_t* offs, const int64_t* caps,
                     const int64_t* counts, int n, uintptr_t dst, uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, const int64_t*, const int64_t*, const int64_t*, int, void*,
	                         void*, int64_t, zccl_stream_t, unsigned))f)(c, dt, (const void*)in, offs, caps, counts, n,
	                                                                      (void*)dst, (void*)ws, wsn, (zccl_stream_t)st, 0);
}
static int zk_reduce(void* f, zccl_ctx* c, int dt, int op, const zccl_source* srcs, int nsrc, int64_t numel,
                     uintptr_t dst, uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, int, const zccl_source*, int, int64_t, void*, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, dt, op, srcs, nsrc, numel, (void*)dst, (void*)ws, wsn,
	                                                      (zccl_stream_t)st, 0);
}
static int zk_ws_status(void* f, zccl_ctx* c, uintptr_t ws, uintptr_t st, char* msg, size_t n) {
	return ((zccl_status (*)(zccl_ctx*, const void*, zccl_stream_t, char*, size_t))f)(c, (const void*)ws,
	                                                                                 (zccl_stream_t)st, msg, n);
}
static int zk_malloc(void* f, zccl_ctx* c, uintptr_t* p, int64_t n) {
	void* q = 0;
	int rc = ((zccl_status (*)(zccl_ctx*, void**, int64_t))f)(c, &q, n);
	*p = (uintptr_t)q;
	return rc;
}
static int zk_free(void* f, zccl_ctx* c, uintptr_t p) { return ((zccl_status (*)(zccl_ctx*, void*))f)(c, (void*)p); }
static int zk_memcpy(void* f, zccl_ctx* c, uintptr_t d, uintptr_t s, int64_t n, int kind) {
	return ((zccl_status (*)(zccl_ctx*, void*, const void*, int64_t, int))f)(c, (void*)d, (const void*)s, n, kind);
}
static int zk_sync(void* f, zccl_ctx* c, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, zccl_stream_t))f)(c, (zccl_stream_t)st);
}
static int zk_encode_split(void* f, zccl_ctx* c, int dt, uintptr_t src, const int64_t* counts, int n, uintptr_t sout,
                           const int64_t* soffs, uintptr_t dout, const int64_t* doffs, uintptr_t dlens, uintptr_t ws,
                           int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, const int64_t*, int, void*, const int64_t*, void*,
	                         const int64_t*, int64_t*, void*, int64_t, zccl_stream_t, unsigned))f)(
	    c, dt, (const void*)src, counts, n, (void*)sout, soffs, (void*)dout, doffs, (int64_t*)dlens, (void*)ws, wsn,
	    (zccl_stream_t)st, 0);
}
static int zk_decode_split(void* f, zccl_ctx* c, int dt, int kind, uintptr_t sin, const int64_t* soffs, uintptr_t din,
                           const int64_t* doffs, const int64_t* dlens, const int64_t* counts, int n, uintptr_t dst,
                           uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, int, const void*, const int64_t*, const void*, const int64_t*,
	                         const int64_t*, const int64_t*, int, void*, void*, int64_t, zccl_stream_t, unsigned))f)(
	    c, dt, kind, (const void*)sin, soffs, (const void*)din, doffs, dlens, counts, n, (void*)dst, (void*)ws, wsn,
	    (zccl_stream_t)st, 0);
}
static int zk_memcpy_async(void* f, zccl_ctx* c, uintptr_t d, uintptr_t s, int64_t n, int kind, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, void*, const void*, int64_t, int, zccl_stream_t))f)(c, (void*)d, (const void*)s, n,
	                                                                                      kind, (zccl_stream_t)st);
}
static int zk_stream_create(void* f, zccl_ctx* c, uintptr_t* out) {
	zccl_stream_t s = 0;
	int rc = ((zccl_status (*)(zccl_ctx*, zccl_stream_t*))f)(c, &s);
	*out = (uintptr_t)s;
	return rc;
}
static void zk_set_source(zccl_source* s, int kind, uintptr_t a, uintptr_t b, int64_t len) {
	s->kind = kind;
	s->a = (const void*)a;
	s->b = (const void*)b;
	s->len = len;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Kernels is libzipccl_cuda.so (cuda/zipccl_cuda.h) loaded with dlopen: the
// codec's CUDA kernels. The engine loads it only on a machine with a GPU.
type Kernels struct {
	path string
	h    unsafe.Pointer
	fn   map[string]unsafe.Pointer
	// serial makes every call take a process-wide lock: the CPU emulation
	// of the same C API (tests) is not reentrant.
	serial bool

	mu   sync.Mutex
	ctxs map[int]*C.zccl_ctx
}

var kernelSerial sync.Mutex

var kernelSyms = []string{
	"zccl_abi_version", "zccl_device_count", "zccl_last_error", "zccl_status_string", "zccl_build_info",
	"zccl_ctx_create", "zccl_ctx_destroy", "zccl_max_frame_len", "zccl_frame_slots",
	"zccl_encode_workspace_size", "zccl_decode_workspace_size", "zccl_reduce_workspace_size",
	"zccl_encode_frames", "zccl_decode_frames", "zccl_decode_reduce", "zccl_workspace_status",
	"zccl_malloc", "zccl_free", "zccl_memcpy", "zccl_synchronize",
	"zccl_encode_split", "zccl_decode_split", "zccl_memcpy_async", "zccl_stream_create",
	"zccl_host_alloc", "zccl_host_free",
}

// kernelsCandidate is ZIPCCL_CUDA_LIB (set by the Python package when it
// ships the library or finds the repository's build/cuda/), else the
// dynamic linker's search path.
func kernelsCandidate() string {
	if p := os.Getenv("ZIPCCL_CUDA_LIB"); p != "" {
		return p
	}
	return "libzipccl_cuda.so"
}

// OpenKernels loads the library at path and checks its ABI version. It
// does not touch a GPU (DeviceCount does).
func OpenKernels(path string) (*Kernels, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var errBuf [512]C.char
	h := C.zc_dlopen(cp, &errBuf[0], C.size_t(len(errBuf)))
	if h == nil {
		return nil, fmt.Errorf("cannot load the CUDA kernel library %s: %s", path, C.GoString(&errBuf[0]))
	}
	k := &Kernels{path: path, h: h, fn: map[string]unsafe.Pointer{}, ctxs: map[int]*C.zccl_ctx{}}
	for _, name := range append(kernelSyms, quantSyms...) {
		cn := C.CString(name)
		p := C.dlsym(h, cn)
		C.free(unsafe.Pointer(cn))
		if p == nil {
			return nil, fmt.Errorf("%s does not export %s (an older libzipccl_cuda.so?)", path, name)
		}
		k.fn[name] = p
	}
	if v := int(C.zk_int(k.fn["zccl_abi_version"])); v != C.ZCCL_ABI_VERSION {
		return nil, fmt.Errorf("%s speaks kernel ABI %d, this engine %d: rebuild both (make cuda)", path, v, C.ZCCL_ABI_VERSION)
	}
	return k, nil
}

// Path of the loaded library.
func (k *Kernels) Path() string { return k.path }

// BuildInfo describes the library (compiler, architectures).
func (k *Kernels) BuildInfo() string { return C.GoString(C.zk_str(k.fn["zccl_build_info"])) }

func (k *Kernels) lock() func() {
	if !k.serial {
		return func() {}
	}
	kernelSerial.Lock()
	return kernelSerial.Unlock
}

// DeviceCount is the number of usable CUDA devices (0 without a driver).
func (k *Kernels) DeviceCount() int {
	defer k.lock()()
	return int(C.zk_int(k.fn["zccl_device_count"]))
}

// KernelError is a failed kernel-library call; Status is a zccl_status.
type KernelError struct {
	Call   string
	Status int
	Msg    string
}

func (e *KernelError) Error() string {
	return fmt.Sprintf("%s: %s", e.Call, e.Msg)
}

// Kernel statuses the engine tells apart (zccl_status).
const (
	zcclCorrupt   = 4
	zcclTruncated = 5
	zcclChecksum  = 6
)

func (k *Kernels) fail(call string, st C.int) error {
	if st == 0 {
		return nil
	}
	msg := C.GoString(C.zk_str(k.fn["zccl_last_error"]))
	if msg == "" {
		msg = C.GoString(C.zk_status_string(k.fn["zccl_status_string"], st))
	}
	return &KernelError{Call: call, Status: int(st), Msg: msg}
}

func (k *Kernels) ctx(device int) (*C.zccl_ctx, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.ctxs[device]; c != nil {
		return c, nil
	}
	var c *C.zccl_ctx
	if err := k.fail("zccl_ctx_create", C.zk_ctx_create(k.fn["zccl_ctx_create"], C.int(device), &c)); err != nil {
		return nil, err
	}
	k.ctxs[device] = c
	return c, nil
}

// cArray copies v into C memory for the duration of a call.
func cArray(v []int64) (*C.int64_t, func()) {
	if len(v) == 0 {
		return nil, func() {}
	}
	p := C.malloc(C.size_t(8 * len(v)))
	copy(unsafe.Slice((*int64)(p), len(v)), v)
	return (*C.int64_t)(p), func() { C.free(p) }
}

// MaxFrameLen is the largest frame EncodeFrames writes for n elements.
func (k *Kernels) MaxFrameLen(dt dtype.DType, n int64) int64 {
	return int64(C.zk_len(k.fn["zccl_max_frame_len"], C.int(dt), C.int64_t(n)))
}

// FrameSlots lays out one 128-aligned slot per chunk (len(counts)+1 offsets).
func (k *Kernels) FrameSlots(dt dtype.DType, counts []int64) ([]int64, error) {
	offs := make([]int64, len(counts)+1)
	cc, free := cArray(counts)
	defer free()
	co, freeO := cArray(offs)
	defer freeO()
	if err := k.fail("zccl_frame_slots", C.zk_slots(k.fn["zccl_frame_slots"], C.int(dt), cc, C.int(len(counts)), co)); err != nil {
		return nil, err
	}
	copy(offs, unsafe.Slice((*int64)(unsafe.Pointer(co)), len(offs)))
	return offs, nil
}

// Workspace sizes.
func (k *Kernels) EncodeWorkspace(dt dtype.DType, counts []int64) int64 {
	cc, free := cArray(counts)
	defer free()
	return int64(C.zk_ws(k.fn["zccl_encode_workspace_size"], C.int(dt), cc, C.int(len(counts))))
}

func (k *Kernels) DecodeWorkspace(dt dtype.DType, counts []int64) int64 {
	cc, free := cArray(counts)
	defer free()
	return int64(C.zk_ws(k.fn["zccl_decode_workspace_size"], C.int(dt), cc, C.int(len(counts))))
}

func (k *Kernels) ReduceWorkspace(dt dtype.DType, numel int64, nsrc int) int64 {
	return int64(C.zk_rws(k.fn["zccl_reduce_workspace_size"], C.int(dt), C.int64_t(numel), C.int(nsrc)))
}

// EncodeFrames encodes src (sum(counts) elements) as len(counts) frames at
// out+offs[c], writing the frame lengths (device int64) to lens.
func (k *Kernels) EncodeFrames(device int, dt dtype.DType, src uintptr, counts []int64, out uintptr, offs []int64, lens, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		cc, f1 := cArray(counts)
		defer f1()
		co, f2 := cArray(offs)
		defer f2()
		return k.fail("zccl_encode_frames", C.zk_encode(k.fn["zccl_encode_frames"], c, C.int(dt), C.uintptr_t(src), cc, C.int(len(counts)),
			C.uintptr_t(out), co, C.uintptr_t(lens), C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// DecodeFrames decodes len(counts) frames (frame c at in+offs[c], caps[c]
// bytes readable) into consecutive chunks of dst.
func (k *Kernels) DecodeFrames(device int, dt dtype.DType, in uintptr, offs, caps, counts []int64, dst, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		co, f1 := cArray(offs)
		defer f1()
		ck, f2 := cArray(caps)
		defer f2()
		cc, f3 := cArray(counts)
		defer f3()
		return k.fail("zccl_decode_frames", C.zk_decode(k.fn["zccl_decode_frames"], c, C.int(dt), C.uintptr_t(in), co, ck, cc, C.int(len(counts)),
			C.uintptr_t(dst), C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// Source of DecodeReduce (zccl_source): plain elements at Ptr, a frame
// at Ptr (Len readable bytes), or split parts: static at Ptr, dynamic at B
// (Len bytes; zip3), or a raw static part alone.
type Source struct {
	Kind int // SrcPlain, SrcFrame, SrcSplitZip3, SrcSplitRaw
	Ptr  uintptr
	B    uintptr
	Len  int64
}

// Source kinds.
const (
	SrcFrame     = C.ZCCL_SRC_FRAME
	SrcSplitZip3 = C.ZCCL_SRC_SPLIT_ZIP3
	SrcSplitRaw  = C.ZCCL_SRC_SPLIT_RAW
	SrcPlain     = C.ZCCL_SRC_PLAIN
)

// DecodeReduce folds the sources in order into dst (numel elements); op is
// reduce.Sum or reduce.Product's value.
func (k *Kernels) DecodeReduce(device int, dt dtype.DType, op int, srcs []Source, numel int64, dst, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		cs := (*C.zccl_source)(C.malloc(C.size_t(len(srcs)) * C.size_t(unsafe.Sizeof(C.zccl_source{}))))
		defer C.free(unsafe.Pointer(cs))
		arr := unsafe.Slice(cs, len(srcs))
		for i, s := range srcs {
			C.zk_set_source(&arr[i], C.int(s.Kind), C.uintptr_t(s.Ptr), C.uintptr_t(s.B), C.int64_t(s.Len))
		}
		return k.fail("zccl_decode_reduce", C.zk_reduce(k.fn["zccl_decode_reduce"], c, C.int(dt), C.int(op), cs, C.int(len(srcs)), C.int64_t(numel),
			C.uintptr_t(dst), C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// WorkspaceStatus synchronizes stream and returns the data error the
// kernels recorded in ws, if any.
func (k *Kernels) WorkspaceStatus(device int, ws, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		var msg [512]C.char
		st := C.zk_ws_status(k.fn["zccl_workspace_status"], c, C.uintptr_t(ws), C.uintptr_t(stream), &msg[0], C.size_t(len(msg)))
		if st == 0 {
			return nil
		}
		text := C.GoString(&msg[0])
		if text == "" {
			text = C.GoString(C.zk_status_string(k.fn["zccl_status_string"], st))
		}
		return &KernelError{Call: "decoding", Status: int(st), Msg: text}
	})
}

// call runs f with device's context, under the library's lock when it has
// one.
func (k *Kernels) call(device int, f func(c *C.zccl_ctx) error) error {
	defer k.lock()()
	c, err := k.ctx(device)
	if err != nil {
		return err
	}
	return f(c)
}

// Malloc, Free, CopyToHost and Sync are the device-memory helpers the coded
// path needs (the library links the CUDA runtime statically; the engine
// itself has none).
func (k *Kernels) Malloc(device int, n int64) (uintptr, error) {
	return k.alloc(device, "zccl_malloc", n)
}

func (k *Kernels) Free(device int, p uintptr) { k.release(device, "zccl_free", p) }

// alloc and release call zccl_malloc / zccl_host_alloc, zccl_free /
// zccl_host_free.
func (k *Kernels) alloc(device int, fn string, n int64) (uintptr, error) {
	var p C.uintptr_t
	err := k.call(device, func(c *C.zccl_ctx) error {
		return k.fail(fn, C.zk_malloc(k.fn[fn], c, &p, C.int64_t(n)))
	})
	return uintptr(p), err
}

func (k *Kernels) release(device int, fn string, p uintptr) {
	if p == 0 {
		return
	}
	_ = k.call(device, func(c *C.zccl_ctx) error {
		C.zk_free(k.fn[fn], c, C.uintptr_t(p))
		return nil
	})
}

// CopyToHost copies n bytes of device memory into dst (synchronously, on
// the legacy default stream: call it after Sync of the stream that wrote
// src).
func (k *Kernels) CopyToHost(device int, dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return k.call(device, func(c *C.zccl_ctx) error {
		tmp := C.malloc(C.size_t(len(dst)))
		defer C.free(tmp)
		if err := k.fail("zccl_memcpy", C.zk_memcpy(k.fn["zccl_memcpy"], c, C.uintptr_t(uintptr(tmp)), C.uintptr_t(src), C.int64_t(len(dst)), 2)); err != nil {
			return err
		}
		copy(dst, unsafe.Slice((*byte)(tmp), len(dst)))
		return nil
	})
}

// CopyFromHost copies src into device memory at dst (synchronously).
func (k *Kernels) CopyFromHost(device int, dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return k.call(device, func(c *C.zccl_ctx) error {
		tmp := C.malloc(C.size_t(len(src)))
		defer C.free(tmp)
		copy(unsafe.Slice((*byte)(tmp), len(src)), src)
		return k.fail("zccl_memcpy", C.zk_memcpy(k.fn["zccl_memcpy"], c, C.uintptr_t(dst), C.uintptr_t(uintptr(tmp)), C.int64_t(len(src)), 1))
	})
}

// Sync waits for stream.
func (k *Kernels) Sync(device int, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_synchronize", C.zk_sync(k.fn["zccl_synchronize"], c, C.uintptr_t(stream)))
	})
}

// EncodeSplit encodes src (sum(counts) elements) in split mode: chunk c's
// static part at staticOut+staticOffs[c] (exactly codec.StaticLen bytes),
// its dynamic part at dynOut+dynOffs[c], its length (device int64) at
// dynLens+8c.
func (k *Kernels) EncodeSplit(device int, dt dtype.DType, src uintptr, counts []int64, staticOut uintptr, staticOffs []int64,
	dynOut uintptr, dynOffs []int64, dynLens, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		cc, f1 := cArray(counts)
		defer f1()
		cs, f2 := cArray(staticOffs)
		defer f2()
		cd, f3 := cArray(dynOffs)
		defer f3()
		return k.fail("zccl_encode_split", C.zk_encode_split(k.fn["zccl_encode_split"], c, C.int(dt), C.uintptr_t(src), cc, C.int(len(counts)),
			C.uintptr_t(staticOut), cs, C.uintptr_t(dynOut), cd, C.uintptr_t(dynLens), C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// DecodeSplit decodes split parts (kind codec.Zip3 or codec.Raw) of
// len(counts) chunks into consecutive chunks of dst.
func (k *Kernels) DecodeSplit(device int, dt dtype.DType, kind int, staticIn uintptr, staticOffs []int64, dynIn uintptr,
	dynOffs, dynLens, counts []int64, dst, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		cs, f1 := cArray(staticOffs)
		defer f1()
		cd, f2 := cArray(dynOffs)
		defer f2()
		cl, f3 := cArray(dynLens)
		defer f3()
		cc, f4 := cArray(counts)
		defer f4()
		return k.fail("zccl_decode_split", C.zk_decode_split(k.fn["zccl_decode_split"], c, C.int(dt), C.int(kind), C.uintptr_t(staticIn), cs,
			C.uintptr_t(dynIn), cd, cl, cc, C.int(len(counts)), C.uintptr_t(dst), C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// Copy directions of MemcpyAsync.
const (
	HostToDevice   = 1
	DeviceToHost   = 2
	DeviceToDevice = 3
)

// MemcpyAsync queues a copy of n bytes on stream (kind: HostToDevice,
// DeviceToHost, DeviceToDevice). Host memory should come from HostAlloc.
func (k *Kernels) MemcpyAsync(device int, dst, src uintptr, n int64, kind int, stream uintptr) error {
	if n == 0 {
		return nil
	}
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_memcpy_async", C.zk_memcpy_async(k.fn["zccl_memcpy_async"], c, C.uintptr_t(dst), C.uintptr_t(src), C.int64_t(n), C.int(kind), C.uintptr_t(stream)))
	})
}

// StreamCreate makes a non-blocking stream of the library's own.
func (k *Kernels) StreamCreate(device int) (uintptr, error) {
	var s C.uintptr_t
	err := k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_stream_create", C.zk_stream_create(k.fn["zccl_stream_create"], c, &s))
	})
	return uintptr(s), err
}

// HostAlloc returns n bytes of page-locked host memory.
func (k *Kernels) HostAlloc(device int, n int64) (uintptr, error) {
	return k.alloc(device, "zccl_host_alloc", n)
}

// HostFree releases memory from HostAlloc.
func (k *Kernels) HostFree(device int, p uintptr) { k.release(device, "zccl_host_free", p) }
