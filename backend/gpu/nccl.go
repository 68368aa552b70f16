package gpu

/*
#cgo CFLAGS: -I${SRCDIR}
#cgo LDFLAGS: -ldl
#include <zc_dl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The parts of nccl.h the engine uses, declared here so that building needs
// no NCCL headers: NCCL is found at run time with dlopen.
typedef struct { char internal[128]; } zc_nccl_id;
typedef void* zc_nccl_comm;
// ncclConfig_t as NCCL 2.14 introduced it; later versions only append fields
// and read the prefix that config.size announces.
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char* netName;
} zc_nccl_config;

typedef int (*fn_get_version)(int*);
typedef int (*fn_get_unique_id)(zc_nccl_id*);
typedef int (*fn_init_rank)(zc_nccl_comm*, int, zc_nccl_id, int);
typedef int (*fn_init_rank_config)(zc_nccl_comm*, int, zc_nccl_id, int, zc_nccl_config*);
typedef int (*fn_comm)(zc_nccl_comm);
typedef int (*fn_async_error)(zc_nccl_comm, int*);
typedef const char* (*fn_error_string)(int);
typedef const char* (*fn_last_error)(zc_nccl_comm);
typedef int (*fn_void)(void);
typedef int (*fn_premul)(int*, void*, int, int, zc_nccl_comm);
typedef int (*fn_op_destroy)(int, zc_nccl_comm);
typedef int (*fn_all_reduce)(const void*, void*, size_t, int, int, zc_nccl_comm, void*);
typedef int (*fn_broadcast)(const void*, void*, size_t, int, int, zc_nccl_comm, void*);
typedef int (*fn_reduce)(const void*, void*, size_t, int, int, int, zc_nccl_comm, void*);
typedef int (*fn_all_gather)(const void*, void*, size_t, int, zc_nccl_comm, void*);
typedef int (*fn_reduce_scatter)(const void*, void*, size_t, int, int, zc_nccl_comm, void*);
typedef int (*fn_send)(const void*, size_t, int, int, zc_nccl_comm, void*);
typedef int (*fn_recv)(void*, size_t, int, int, zc_nccl_comm, void*);


static int zc_call_get_version(void* f, int* v) { return ((fn_get_version)f)(v); }
static int zc_call_get_unique_id(void* f, void* id) { return ((fn_get_unique_id)f)((zc_nccl_id*)id); }
static int zc_call_init_rank(void* f, zc_nccl_comm* c, int n, void* id, int r) {
	zc_nccl_id x;
	memcpy(&x, id, sizeof(x));
	return ((fn_init_rank)f)(c, n, x, r);
}
static int zc_call_init_rank_config(void* f, zc_nccl_comm* c, int n, void* id, int r, int blocking, int version) {
	zc_nccl_id x;
	memcpy(&x, id, sizeof(x));
	zc_nccl_config cfg;
	cfg.size = sizeof(cfg);
	cfg.magic = 0xcafebeef;
	cfg.version = (unsigned)version;
	cfg.blocking = blocking;
	cfg.cgaClusterSize = (int)0x80000000; // NCCL_CONFIG_UNDEF_INT
	cfg.minCTAs = (int)0x80000000;
	cfg.maxCTAs = (int)0x80000000;
	cfg.netName = NULL;
	return ((fn_init_rank_config)f)(c, n, x, r, &cfg);
}
static int zc_call_comm(void* f, zc_nccl_comm c) { return ((fn_comm)f)(c); }
static int zc_call_async_error(void* f, zc_nccl_comm c, int* e) { return ((fn_async_error)f)(c, e); }
static const char* zc_call_error_string(void* f, int r) { return ((fn_error_string)f)(r); }
static const char* zc_call_last_error(void* f, zc_nccl_comm c) { return ((fn_last_error)f)(c); }
static int zc_call_void(void* f) { return ((fn_void)f)(); }
static int zc_call_premul(void* f, int* op, void* scalar, int dt, zc_nccl_comm c) {
	return ((fn_premul)f)(op, scalar, dt, 1, c); // ncclScalarHostImmediate
}
static int zc_call_op_destroy(void* f, int op, zc_nccl_comm c) { return ((fn_op_destroy)f)(op, c); }
static int zc_call_all_reduce(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, zc_nccl_comm c, uintptr_t st) {
	return ((fn_all_reduce)f)((const void*)s, (void*)r, n, dt, op, c, (void*)st);
}
static int zc_call_broadcast(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int root, zc_nccl_comm c, uintptr_t st) {
	return ((fn_broadcast)f)((const void*)s, (void*)r, n, dt, root, c, (void*)st);
}
static int zc_call_reduce(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, int root, zc_nccl_comm c, uintptr_t st) {
	return ((fn_reduce)f)((const void*)s, (void*)r, n, dt, op, root, c, (void*)st);
}
static int zc_call_all_gather(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, zc_nccl_comm c, uintptr_t st) {
	return ((fn_all_gather)f)((const void*)s, (void*)r, n, dt, c, (void*)st);
}
static int zc_call_reduce_scatter(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, zc_nccl_comm c, uintptr_t st) {
	return ((fn_reduce_scatter)f)((const void*)s, (void*)r, n, dt, op, c, (void*)st);
}
static int zc_call_send(void* f, uintptr_t b, size_t n, int dt, int peer, zc_nccl_comm c, uintptr_t st) {
	return ((fn_send)f)((const void*)b, n, dt, peer, c, (void*)st);
}
static int zc_call_recv(void* f, uintptr_t b, size_t n, int dt, int peer, zc_nccl_comm c, uintptr_t st) {
	return ((fn_recv)f)((void*)b, n, dt, peer, c, (void*)st);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// NCCL result codes (ncclResult_t).
const (
	ncclSuccess         = 0
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
	ncclInProgress      = 7
)

// NCCL data types (ncclDataType_t).
type ncclDataType int32

const (
	ncclInt8     ncclDataType = 0
	ncclUint8    ncclDataType = 1
	ncclInt32    ncclDataType = 2
	ncclUint32   ncclDataType = 3
	ncclInt64    ncclDataType = 4
	ncclUint64   ncclDataType = 5
	ncclFloat16  ncclDataType = 6
	ncclFloat32  ncclDataType = 7
	ncclFloat64  ncclDataType = 8
	ncclBfloat16 ncclDataType = 9
)

// NCCL reduction ops (ncclRedOp_t); PreMulSum ops are created per call.
type ncclRedOp int32

const (
	ncclSum  ncclRedOp = 0
	ncclProd ncclRedOp = 1
	ncclMax  ncclRedOp = 2
	ncclMin  ncclRedOp = 3
	ncclAvg  ncclRedOp = 4
)

// UniqueID is ncclUniqueId.
type UniqueID [128]byte

// ncclLib is the process-wide part of NCCL: the engine's code talks to it
// (and to ncclComm) only through these interfaces, so that tests can run the
// GPU path's logic over a fake NCCL on host memory.
type ncclLib interface {
	Version() int
	UniqueID() (UniqueID, error)
	// InitRank starts creating a communicator on the calling thread's
	// current CUDA device; Wait on the result finishes it.
	InitRank(nranks int, id UniqueID, rank int) (ncclComm, error)
	GroupStart() error
	GroupEnd() error
}

// ncclComm is one NCCL communicator. Buffers are device addresses, counts
// are elements of dt, stream is a cudaStream_t. The collective calls only
// enqueue; Settle waits until a non-blocking communicator finished
// enqueueing (or creating itself).
type ncclComm interface {
	Settle(deadline time.Time) error
	AsyncError() error
	AllReduce(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, stream uintptr) error
	Broadcast(send, recv uintptr, count int, dt ncclDataType, root int, stream uintptr) error
	Reduce(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, root int, stream uintptr) error
	AllGather(send, recv uintptr, count int, dt ncclDataType, stream uintptr) error
	ReduceScatter(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, stream uintptr) error
	Send(buf uintptr, count int, dt ncclDataType, peer int, stream uintptr) error
	Recv(buf uintptr, count int, dt ncclDataType, peer int, stream uintptr) error
	// PreMulSum creates a PREMUL_SUM op with the host scalar (the bytes of
	// one element of dt); DestroyOp frees it after the calls that use it.
	PreMulSum(scalar []byte, dt ncclDataType) (ncclRedOp, error)
	DestroyOp(op ncclRedOp)
	Abort() error
	Destroy() error
}

// NCCLError is a failed NCCL call.
type NCCLError struct {
	Call   string
	Result int
	Text   string // ncclGetErrorString
	Detail string // ncclGetLastError, when NCCL has one
}

func (e *NCCLError) Error() string {
	s := fmt.Sprintf("%s failed: %s (ncclResult_t %d)", e.Call, e.Text, e.Result)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// realNCCL is libnccl loaded with dlopen.
type realNCCL struct {
	path    string
	version int
	h       unsafe.Pointer
	fn      map[string]unsafe.Pointer
	// blockingOnly: the library predates ncclCommInitRankConfig (2.14), or
	// ZIPCCL_NCCL_BLOCKING_INIT=1.
	blockingOnly bool
}

// required symbols; the optional ones are looked up where used.
var ncclRequired = []string{
	"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommAbort", "ncclCommDestroy",
	"ncclCommGetAsyncError", "ncclGetErrorString", "ncclGroupStart", "ncclGroupEnd",
	"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
	"ncclSend", "ncclRecv",
}

// ncclCandidates are the libraries LoadNCCL tries: ZIPCCL_NCCL_LIB alone when
// set (the Python package sets it to the copy in torch's wheel; pointing it
// at a missing file forces the host-staged path), else the system's.
func ncclCandidates() []string {
	if p := os.Getenv("ZIPCCL_NCCL_LIB"); p != "" {
		return []string{p}
	}
	return []string{"libnccl.so.2", "libnccl.so"}
}

// loadNCCL opens the first loadable candidate. The error names every
// candidate and why it failed; it never panics or aborts the process.
func loadNCCL(candidates []string) (*realNCCL, error) {
	var why []string
	for _, p := range candidates {
		lib, err := openNCCL(p)
		if err == nil {
			return lib, nil
		}
		why = append(why, err.Error())
	}
	if len(why) == 0 {
		return nil, errors.New("no NCCL library to try")
	}
	return nil, fmt.Errorf("NCCL is not available: %s", strings.Join(why, "; "))
}

func openNCCL(path string) (*realNCCL, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var errBuf [512]C.char
	h := C.zc_dlopen(cp, &errBuf[0], C.size_t(len(errBuf)))
	if h == nil {
		return nil, fmt.Errorf("cannot load %s: %s", path, C.GoString(&errBuf[0]))
	}
	lib := &realNCCL{path: path, h: h, fn: map[string]unsafe.Pointer{}}
	for _, name := range append(append([]string{}, ncclRequired...), "ncclCommInitRankConfig", "ncclGetLastError",
		"ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclCommFinalize") {
		cn := C.CString(name)
		p := C.dlsym(h, cn)
		C.free(unsafe.Pointer(cn))
		if p != nil {
			lib.fn[name] = p
		}
	}
	for _, name := range ncclRequired {
		if lib.fn[name] == nil {
			// The handle stays open: unloading a half-used library is
			// not worth the risk.
			return nil, fmt.Errorf("%s does not export %s (not an NCCL >= 2.7 library)", path, name)
		}
	}
	var v C.int
	if rc := C.zc_call_get_version(lib.fn["ncclGetVersion"], &v); rc != ncclSuccess {
		return nil, fmt.Errorf("%s: ncclGetVersion failed (%d)", path, int(rc))
	}
	lib.version = int(v)
	lib.blockingOnly = lib.fn["ncclCommInitRankConfig"] == nil || lib.version < 21400 ||
		os.Getenv("ZIPCCL_NCCL_BLOCKING_INIT") == "1"
	return lib, nil
}

// versionString renders NCCL's version code (2.19.3 is 21903).
func versionString(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

func (l *realNCCL) Version() int { return l.version }

func (l *realNCCL) err(call string, rc C.int, comm C.zc_nccl_comm) error {
	if rc == ncclSuccess {
		return nil
	}
	e := &NCCLError{Call: call, Result: int(rc), Text: C.GoString(C.zc_call_error_string(l.fn["ncclGetErrorString"], rc))}
	if f := l.fn["ncclGetLastError"]; f != nil {
		e.Detail = C.GoString(C.zc_call_last_error(f, comm))
	}
	return e
}

func (l *realNCCL) UniqueID() (UniqueID, error) {
	var id UniqueID
	buf := C.malloc(C.size_t(len(id)))
	defer C.free(buf)
	if err := l.err("ncclGetUniqueId", C.zc_call_get_unique_id(l.fn["ncclGetUniqueId"], buf), nil); err != nil {
		return id, err
	}
	copy(id[:], unsafe.Slice((*byte)(buf), len(id)))
	return id, nil
}

func (l *realNCCL) InitRank(nranks int, id UniqueID, rank int) (ncclComm, error) {
	idp := C.malloc(C.size_t(len(id)))
	defer C.free(idp)
	copy(unsafe.Slice((*byte)(idp), len(id)), id[:])
	var c C.zc_nccl_comm
	if !l.blockingOnly {
		// Non-blocking: creation goes on in NCCL's threads while Settle
		// polls it under the op's deadline, so a rank that never joins
		// ends in a timeout and ncclCommAbort, not a hang.
		rc := C.zc_call_init_rank_config(l.fn["ncclCommInitRankConfig"], &c, C.int(nranks), idp, C.int(rank), 0, 21400)
		switch {
		case rc == ncclSuccess || rc == ncclInProgress:
			return &realComm{lib: l, c: c, nonBlocking: true}, nil
		case (rc == ncclInvalidArgument || rc == ncclInvalidUsage) && c == nil:
			// This library does not take the 2.14 config: fall back
			// to the blocking call (nothing was started).
			l.blockingOnly = true
		default:
			return nil, l.err("ncclCommInitRankConfig", rc, c)
		}
	}
	rc := C.zc_call_init_rank(l.fn["ncclCommInitRank"], &c, C.int(nranks), idp, C.int(rank))
	if rc != ncclSuccess {
		return nil, l.err("ncclCommInitRank", rc, c)
	}
	return &realComm{lib: l, c: c}, nil
}

func (l *realNCCL) GroupStart() error {
	return l.err("ncclGroupStart", C.zc_call_void(l.fn["ncclGroupStart"]), nil)
}

func (l *realNCCL) GroupEnd() error {
	rc := C.zc_call_void(l.fn["ncclGroupEnd"])
	if rc == ncclInProgress {
		return nil // the communicators' Settle waits for it
	}
	return l.err("ncclGroupEnd", rc, nil)
}

// realComm is an ncclComm_t.
type realComm struct {
	lib         *realNCCL
	c           C.zc_nccl_comm
	nonBlocking bool
	mu          sync.Mutex // Abort vs Destroy
	gone        bool
}

func (c *realComm) check(call string, rc C.int) error {
	if rc == ncclInProgress && c.nonBlocking {
		return nil // Settle waits for it
	}
	return c.lib.err(call, rc, c.c)
}

func (c *realComm) Settle(deadline time.Time) error {
	if !c.nonBlocking {
		return nil
	}
	pause := 10 * time.Microsecond
	for {
		var st C.int
		if rc := C.zc_call_async_error(c.lib.fn["ncclCommGetAsyncError"], c.c, &st); rc != ncclSuccess {
			return c.lib.err("ncclCommGetAsyncError", rc, c.c)
		}
		if st != ncclInProgress {
			return c.lib.err("NCCL", st, c.c)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return errSettleTimeout
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

var errSettleTimeout = errors.New("NCCL did not finish in time")

func (c *realComm) AsyncError() error {
	var st C.int
	if rc := C.zc_call_async_error(c.lib.fn["ncclCommGetAsyncError"], c.c, &st); rc != ncclSuccess {
		return c.lib.err("ncclCommGetAsyncError", rc, c.c)
	}
	if st == ncclSuccess || st == ncclInProgress {
		return nil
	}
	return c.lib.err("NCCL (asynchronous error)", st, c.c)
}

func (c *realComm) AllReduce(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, stream uintptr) error {
	return c.check("ncclAllReduce", C.zc_call_all_reduce(c.lib.fn["ncclAllReduce"], C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), c.c, C.uintptr_t(stream)))
}

func (c *realComm) Broadcast(send, recv uintptr, count int, dt ncclDataType, root int, stream uintptr) error {
	return c.check("ncclBroadcast", C.zc_call_broadcast(c.lib.fn["ncclBroadcast"], C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(root), c.c, C.uintptr_t(stream)))
}

func (c *realComm) Reduce(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, root int, stream uintptr) error {
	return c.check("ncclReduce", C.zc_call_reduce(c.lib.fn["ncclReduce"], C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), C.int(root), c.c, C.uintptr_t(stream)))
}

func (c *realComm) AllGather(send, recv uintptr, count int, dt ncclDataType, stream uintptr) error {
	return c.check("ncclAllGather", C.zc_call_all_gather(c.lib.fn["ncclAllGather"], C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), c.c, C.uintptr_t(stream)))
}

func (c *realComm) ReduceScatter(send, recv uintptr, count int, dt ncclDataType, op ncclRedOp, stream uintptr) error {
	return c.check("ncclReduceScatter", C.zc_call_reduce_scatter(c.lib.fn["ncclReduceScatter"], C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), c.c, C.uintptr_t(stream)))
}

func (c *realComm) Send(buf uintptr, count int, dt ncclDataType, peer int, stream uintptr) error {
	return c.check("ncclSend", C.zc_call_send(c.lib.fn["ncclSend"], C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), c.c, C.uintptr_t(stream)))
}

func (c *realComm) Recv(buf uintptr, count int, dt ncclDataType, peer int, stream uintptr) error {
	return c.check("ncclRecv", C.zc_call_recv(c.lib.fn["ncclRecv"], C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), c.c, C.uintptr_t(stream)))
}

func (c *realComm) PreMulSum(scalar []byte, dt ncclDataType) (ncclRedOp, error) {
	f := c.lib.fn["ncclRedOpCreatePreMulSum"]
	if f == nil {
		return 0, fmt.Errorf("%s (NCCL %s) has no ncclRedOpCreatePreMulSum (NCCL >= 2.11 needed)", c.lib.path, versionString(c.lib.version))
	}
	p := C.malloc(C.size_t(max(len(scalar), 8)))
	defer C.free(p)
	copy(unsafe.Slice((*byte)(p), len(scalar)), scalar)
	var op C.int
	if err := c.check("ncclRedOpCreatePreMulSum", C.zc_call_premul(f, &op, p, C.int(dt), c.c)); err != nil {
		return 0, err
	}
	return ncclRedOp(op), nil
}

func (c *realComm) DestroyOp(op ncclRedOp) {
	if f := c.lib.fn["ncclRedOpDestroy"]; f != nil {
		C.zc_call_op_destroy(f, C.int(op), c.c)
	}
}

func (c *realComm) Abort() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil
	}
	c.gone = true
	return c.lib.err("ncclCommAbort", C.zc_call_comm(c.lib.fn["ncclCommAbort"], c.c), nil)
}

func (c *realComm) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil
	}
	c.gone = true
	if f := c.lib.fn["ncclCommFinalize"]; f != nil {
		rc := C.zc_call_comm(f, c.c)
		if rc == ncclInProgress || (rc == ncclSuccess && c.nonBlocking) {
			c.mu.Unlock()
			err := c.Settle(time.Now().Add(10 * time.Second))
			c.mu.Lock()
			if err != nil {
				return c.lib.err("ncclCommAbort", C.zc_call_comm(c.lib.fn["ncclCommAbort"], c.c), nil)
			}
		}
	}
	return c.lib.err("ncclCommDestroy", C.zc_call_comm(c.lib.fn["ncclCommDestroy"], c.c), nil)
}
