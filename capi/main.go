// Command capi is libzipccl.so: the C ABI of the Go engine, built with
// -buildmode=c-shared and loaded by the C++ shim with dlopen on first use.
// It is the only package main: it converts C types to Go ones, turns
// handles into objects, and keeps every Go panic on this side of the
// boundary. The types and function signatures are in zipccl_abi.h.
package main

/*
#include <stdlib.h>
#include <string.h>
#cgo CFLAGS: -I${SRCDIR}
#include <zipccl_abi.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/cgo"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/zipccl/zipccl/backend/cenv"
	"github.com/zipccl/zipccl/backend/comm"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/sysinfo"
	"github.com/zipccl/zipccl/backend/workq"
	"github.com/zipccl/zipccl/backend/zlog"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {}

var (
	storeMu  sync.RWMutex
	storeSet C.zc_store_set_fn
	storeGet C.zc_store_get_fn

	completions = workq.New()
	loadPid     = os.Getpid()
)

// writeErr copies msg into a C buffer of cap bytes, NUL-terminated.
func writeErr(buf *C.char, capacity C.int32_t, msg string) {
	if buf == nil || capacity <= 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
	n := copy(b[:len(b)-1], msg)
	b[n] = 0
}

// guard converts a panic into an error code and message. Every export
// defers it: a Go panic must never unwind into C++.
func guard(code *C.int32_t, buf *C.char, capacity C.int32_t) {
	if r := recover(); r != nil {
		msg := fmt.Sprintf("zipccl: internal error: %v\n%s", r, debug.Stack())
		zlog.Process.Warnf("%s", msg)
		writeErr(buf, capacity, msg)
		if code != nil {
			*code = C.ZC_ERR_INTERNAL
		}
	}
}

func forkCheck() error {
	if os.Getpid() != loadPid {
		return fmt.Errorf("zipccl: called in a forked child process (pid %d; loaded by pid %d): the Go runtime cannot be used after fork", os.Getpid(), loadPid)
	}
	return nil
}

//export zc_init
func zc_init(set C.zc_store_set_fn, get C.zc_store_get_fn) (code C.int32_t) {
	defer guard(&code, nil, 0)
	storeMu.Lock()
	storeSet, storeGet = set, get
	storeMu.Unlock()
	return C.ZC_ABI_VERSION
}

//export zc_comm_create
func zc_comm_create(cfg *C.zc_comm_config, errBuf *C.char, errLen C.int32_t) (h C.uintptr_t) {
	var code C.int32_t
	defer guard(&code, errBuf, errLen)
	if err := forkCheck(); err != nil {
		writeErr(errBuf, errLen, err.Error())
		return 0
	}
	name := ""
	if cfg.group_name != nil {
		name = C.GoString(cfg.group_name)
	}
	opts := map[string]string{}
	if cfg.options != nil {
		opts = parseOptions(C.GoString(cfg.options))
	}
	c, err := comm.New(comm.Config{
		Rank:     int(cfg.rank),
		Size:     int(cfg.size),
		Name:     name,
		Timeout:  time.Duration(cfg.timeout_ms) * time.Millisecond,
		Store:    &cStore{handle: cfg.store},
		Options:  opts,
		Complete: complete,
	})
	if err != nil {
		writeErr(errBuf, errLen, err.Error())
		return 0
	}
	return C.uintptr_t(cgo.NewHandle(c))
}

func parseOptions(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) != "" {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

func complete(ticket uint64, source int, err error) {
	c := workq.Completion{Ticket: ticket, Source: int32(source)}
	if err != nil {
		c.Status = int32(comm.CodeOf(err))
		c.Message = err.Error()
	}
	completions.Push(c)
}

func commOf(h C.uintptr_t) (*comm.Comm, error) {
	if h == 0 {
		return nil, fmt.Errorf("zipccl: null communicator handle")
	}
	c, ok := cgo.Handle(h).Value().(*comm.Comm)
	if !ok {
		return nil, fmt.Errorf("zipccl: invalid communicator handle")
	}
	return c, nil
}

// liveComm is the communicator behind h for a call that needs a usable
// process (not a forked child): nil, with the error written and its code,
// otherwise.
func liveComm(h C.uintptr_t, errBuf *C.char, errLen C.int32_t) (*comm.Comm, C.int32_t) {
	if err := forkCheck(); err != nil {
		writeErr(errBuf, errLen, err.Error())
		return nil, C.ZC_ERR_COMM
	}
	c, err := commOf(h)
	if err != nil {
		writeErr(errBuf, errLen, err.Error())
		return nil, C.ZC_ERR_INVALID
	}
	return c, C.ZC_OK
}

// buffers views C memory as Go slices (no copy): tensor storage stays owned
// by the caller, who keeps it alive until the op's completion.
func buffers(bufs *C.zc_buf, n C.int32_t, elem int) [][]byte {
	if n <= 0 || bufs == nil {
		return nil
	}
	src := unsafe.Slice(bufs, int(n))
	out := make([][]byte, len(src))
	for i, b := range src {
		if b.ptr != nil && b.numel > 0 {
			out[i] = unsafe.Slice((*byte)(b.ptr), int(b.numel)*elem)
		} else {
			out[i] = []byte{}
		}
	}
	return out
}

//export zc_comm_submit
func zc_comm_submit(h C.uintptr_t, op *C.zc_op, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	c, rc := liveComm(h, errBuf, errLen)
	if c == nil {
		return rc
	}
	o := opOf(op) // gpu.go; device ops carry their stream and end event
	if err := c.Submit(o); err != nil {
		writeErr(errBuf, errLen, err.Error())
		return C.int32_t(comm.CodeOf(err))
	}
	return C.ZC_OK
}

//export zc_comm_set_timeout
func zc_comm_set_timeout(h C.uintptr_t, ms C.int64_t) (code C.int32_t) {
	defer guard(&code, nil, 0)
	c, err := commOf(h)
	if err != nil {
		return C.ZC_ERR_INVALID
	}
	c.SetTimeout(time.Duration(ms) * time.Millisecond)
	return C.ZC_OK
}

//export zc_comm_set_lossy
func zc_comm_set_lossy(h C.uintptr_t, spec *C.char, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	c, rc := liveComm(h, errBuf, errLen)
	if c == nil {
		return rc
	}
	if err := c.SetLossy(C.GoString(spec)); err != nil {
		writeErr(errBuf, errLen, err.Error())
		return C.int32_t(comm.CodeOf(err))
	}
	return C.ZC_OK
}

//export zc_comm_monitored_barrier
func zc_comm_monitored_barrier(h C.uintptr_t, ms C.int64_t, waitAll C.int32_t, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	c, rc := liveComm(h, errBuf, errLen)
	if c == nil {
		return rc
	}
	if err := c.MonitoredBarrier(time.Duration(ms)*time.Millisecond, waitAll != 0); err != nil {
		writeErr(errBuf, errLen, err.Error())
		return C.int32_t(comm.CodeOf(err))
	}
	return C.ZC_OK
}

//export zc_comm_abort
func zc_comm_abort(h C.uintptr_t, reason *C.char) (code C.int32_t) {
	defer guard(&code, nil, 0)
	if forkCheck() != nil {
		return C.ZC_ERR_COMM
	}
	c, err := commOf(h)
	if err != nil {
		return C.ZC_ERR_INVALID
	}
	r := ""
	if reason != nil {
		r = C.GoString(reason)
	}
	c.Abort(r)
	return C.ZC_OK
}

//export zc_comm_destroy
func zc_comm_destroy(h C.uintptr_t) (code C.int32_t) {
	defer guard(&code, nil, 0)
	if forkCheck() != nil {
		return C.ZC_ERR_COMM
	}
	c, err := commOf(h)
	if err != nil {
		return C.ZC_ERR_INVALID
	}
	c.Close()
	cgo.Handle(h).Delete()
	return C.ZC_OK
}

//export zc_comm_stats
func zc_comm_stats(h C.uintptr_t, buf *C.char, capacity C.int32_t) (n C.int32_t) {
	defer guard(nil, buf, capacity)
	c, err := commOf(h)
	if err != nil {
		return -1
	}
	js, err := c.Stats()
	if err != nil {
		return -1
	}
	return writeJSON(buf, capacity, js)
}

//export zc_comm_hosts
func zc_comm_hosts(h C.uintptr_t, buf *C.char, capacity C.int32_t, errBuf *C.char, errLen C.int32_t) (n C.int32_t) {
	var code C.int32_t
	defer func() {
		if code != C.ZC_OK {
			n = -1
		}
	}()
	defer guard(&code, errBuf, errLen)
	c, code := liveComm(h, errBuf, errLen)
	if c == nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout())
	defer cancel()
	layout, err := c.Hosts(ctx)
	if err != nil {
		writeErr(errBuf, errLen, err.Error())
		return -1
	}
	js, err := json.Marshal(layout)
	if err != nil {
		writeErr(errBuf, errLen, err.Error())
		return -1
	}
	return writeJSON(buf, capacity, js)
}

// writeJSON copies js when it fits (with its NUL) and returns its length,
// so a caller with a short buffer can retry with a bigger one.
func writeJSON(buf *C.char, capacity C.int32_t, js []byte) C.int32_t {
	if buf != nil && int(capacity) > len(js) {
		b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
		copy(b, js)
		b[len(js)] = 0
	}
	return C.int32_t(len(js))
}

//export zc_poll
func zc_poll(timeoutMs C.int64_t, out *C.zc_completion) (got C.int32_t) {
	defer guard(nil, nil, 0)
	c, ok := completions.Poll(time.Duration(timeoutMs) * time.Millisecond)
	if !ok {
		return 0
	}
	out.ticket = C.uint64_t(c.Ticket)
	out.status = C.int32_t(c.Status)
	out.source = C.int32_t(c.Source)
	msg := unsafe.Slice((*byte)(unsafe.Pointer(&out.message[0])), len(out.message))
	n := copy(msg[:len(msg)-1], c.Message)
	msg[n] = 0
	return 1
}

//export zc_info
func zc_info(buf *C.char, capacity C.int32_t) (n C.int32_t) {
	defer guard(nil, buf, capacity)
	cenv.Sync() // the shim calls this holding the GIL: no os.environ write can race the walk
	js, err := json.Marshal(sysinfo.Probe(version, os.Getenv("ZIPCCL_NCCL_LIB")))
	if err != nil {
		return -1
	}
	return writeJSON(buf, capacity, js)
}

// dtypeOf and reduceOf map ABI codes; out-of-range codes become invalid
// values that validation rejects, rather than wrapping into valid ones.
func dtypeOf(v C.int32_t) dtype.DType {
	if v < 0 || v > 255 {
		return dtype.Invalid
	}
	return dtype.DType(v)
}

func reduceOf(v C.int32_t) reduce.Op {
	if v < 0 || v > 255 {
		return reduce.Op(255)
	}
	return reduce.Op(v)
}
