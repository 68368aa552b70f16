package main

/*
#include <stdlib.h>
#cgo CFLAGS: -I${SRCDIR}
#include <zipccl_abi.h>

static int32_t zc_call_dev_query(zc_dev_query_fn f, uintptr_t done, char* e, int32_t el) {
	return f(done, e, el);
}
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/zipccl/zipccl/backend/comm"
	"github.com/zipccl/zipccl/backend/gpu"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/sysinfo"
)

// The GPU path's exports (zipccl_abi.h, "GPU path").

var (
	devQueryMu sync.RWMutex
	devQuery   C.zc_dev_query_fn
)

func init() {
	sysinfo.KernelsProbe = func(haveGPU bool) sysinfo.Kernels {
		path, loaded, errText := gpu.ProbeKernels(haveGPU)
		return sysinfo.Kernels{Path: path, Loaded: loaded, Error: errText}
	}
}

//export zc_init_device
func zc_init_device(query C.zc_dev_query_fn) (code C.int32_t) {
	defer guard(&code, nil, 0)
	devQueryMu.Lock()
	devQuery = query
	devQueryMu.Unlock()
	gpu.SetEventQuery(queryEvent)
	return C.ZC_ABI_VERSION
}

// queryEvent asks the shim whether an op's end event completed.
func queryEvent(done uintptr) (bool, error) {
	devQueryMu.RLock()
	f := devQuery
	devQueryMu.RUnlock()
	if f == nil {
		return false, errors.New("zipccl: the shim registered no event query (zc_init_device)")
	}
	var errBuf [512]C.char
	switch C.zc_call_dev_query(f, C.uintptr_t(done), &errBuf[0], C.int32_t(len(errBuf))) {
	case 1:
		return true, nil
	case 0:
		return false, nil
	}
	return false, errors.New(C.GoString(&errBuf[0]))
}

// deviceOf reads the ABI-2 device fields of op (nil for a host op).
func deviceOf(op *C.zc_op) *comm.DeviceOp {
	if op.flags&C.ZC_OPF_DEVICE == 0 {
		return nil
	}
	return &comm.DeviceOp{
		Index:  int(op.device),
		Stream: uintptr(op.stream),
		Done:   uintptr(op.done),
		Defer:  op.flags&C.ZC_OPF_DEFER != 0,
		Engine: op.flags&C.ZC_OPF_ENGINE != 0,
	}
}

// opOf converts a zc_op as zc_comm_submit does.
func opOf(op *C.zc_op) *comm.Op {
	o := &comm.Op{
		Ticket:  uint64(op.ticket),
		Kind:    opkind.Kind(op.kind),
		Root:    int(op.root),
		Tag:     int64(op.tag),
		Timeout: int64(op.timeout_ms),
		PreMul:  float64(op.premul),
	}
	o.DType = dtypeOf(op.dtype)
	o.ReduceOp = reduceOf(op.redop)
	elem := max(o.DType.Size(), 1)
	o.In = buffers(op.in, op.n_in, elem)
	o.Out = buffers(op.out, op.n_out, elem)
	o.Dev = deviceOf(op)
	o.Staged = op.flags&C.ZC_OPF_STAGED != 0
	return o
}

//export zc_comm_device_plan
func zc_comm_device_plan(h C.uintptr_t, op *C.zc_op, out *C.zc_dev_plan, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	c, rc := liveComm(h, errBuf, errLen)
	if c == nil {
		return rc
	}
	o := opOf(op)
	if o.Dev == nil {
		o.Dev = &comm.DeviceOp{Index: int(op.device)}
	}
	p, err := c.DevicePlan(o)
	if err != nil {
		writeErr(errBuf, errLen, err.Error())
		return C.int32_t(comm.CodeOf(err))
	}
	if p.Refuse != "" {
		writeErr(errBuf, errLen, "zipccl: "+o.Kind.String()+": "+p.Refuse)
		return C.ZC_ERR_INVALID
	}
	out.path = C.int32_t(p.Path)
	reason := unsafe.Slice((*byte)(unsafe.Pointer(&out.reason[0])), len(out.reason))
	n := copy(reason[:len(reason)-1], p.Reason)
	reason[n] = 0
	return C.ZC_OK
}

//export zc_comm_device_flush
func zc_comm_device_flush(h C.uintptr_t, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	c, rc := liveComm(h, errBuf, errLen)
	if c == nil {
		return rc
	}
	if err := c.DeviceFlush(); err != nil {
		writeErr(errBuf, errLen, err.Error())
		return C.int32_t(comm.CodeOf(err))
	}
	return C.ZC_OK
}
