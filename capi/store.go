package main

/*
#include <stdlib.h>
#cgo CFLAGS: -I${SRCDIR}
#include <zipccl_abi.h>

// cgo cannot call C function pointers directly.
static int32_t zc_call_store_set(zc_store_set_fn f, uintptr_t s, const char* k,
                                 const void* v, int64_t n, char* e, int32_t el) {
	return f(s, k, v, n, e, el);
}
static int32_t zc_call_store_get(zc_store_get_fn f, uintptr_t s, const char* k,
                                 int64_t t, void* b, int64_t cap, int64_t* n,
                                 char* e, int32_t el) {
	return f(s, k, t, b, cap, n, e, el);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// cStore is rendezvous.Store over the shim's c10d::Store callbacks.
type cStore struct {
	handle C.uintptr_t
}

const storeErrLen = 1024

func (s *cStore) fns() (C.zc_store_set_fn, C.zc_store_get_fn, error) {
	storeMu.RLock()
	defer storeMu.RUnlock()
	if storeSet == nil || storeGet == nil {
		return nil, nil, errors.New("zipccl: store callbacks not registered (zc_init not called)")
	}
	return storeSet, storeGet, nil
}

func (s *cStore) Set(key string, val []byte) error {
	set, _, err := s.fns()
	if err != nil {
		return err
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var errBuf [storeErrLen]C.char
	var p unsafe.Pointer
	if len(val) > 0 {
		p = unsafe.Pointer(&val[0])
	}
	if rc := C.zc_call_store_set(set, s.handle, ck, p, C.int64_t(len(val)), &errBuf[0], storeErrLen); rc != 0 {
		return fmt.Errorf("store set %q: %s", key, C.GoString(&errBuf[0]))
	}
	return nil
}

func (s *cStore) Get(ctx context.Context, key string) ([]byte, error) {
	_, get, err := s.fns()
	if err != nil {
		return nil, err
	}
	timeout := time.Hour
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 || ctx.Err() != nil {
		return nil, fmt.Errorf("store get %q: %w", key, context.Cause(ctx))
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	buf := make([]byte, 256)
	for {
		var n C.int64_t
		var errBuf [storeErrLen]C.char
		rc := C.zc_call_store_get(get, s.handle, ck, C.int64_t(timeout.Milliseconds()+1),
			unsafe.Pointer(&buf[0]), C.int64_t(len(buf)), &n, &errBuf[0], storeErrLen)
		switch {
		case rc == 0:
			return buf[:n], nil
		case rc == 2 && int(n) > len(buf):
			buf = make([]byte, n)
		default:
			return nil, fmt.Errorf("store get %q: %s", key, C.GoString(&errBuf[0]))
		}
	}
}
