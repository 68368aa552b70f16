//go:build gpu && cgo

package gotest

/*
#cgo CFLAGS: -I${SRCDIR}/..
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include "zipccl_cuda.h"

static void* zc_open(const char* path, const char** err) {
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) *err = dlerror();
	return h;
}
static void* zc_sym(void* h, const char* name) { return dlsym(h, name); }

static int zc_device_count(void* f) { return ((int (*)(void))f)(); }
static const char* zc_string(void* f) { return ((const char* (*)(void))f)(); }
static int zc_ctx_create(void* f, int dev, zccl_ctx** out) { return ((zccl_status (*)(int, zccl_ctx**))f)(dev, out); }
static int64_t zc_ws(void* f, int dtype, const int64_t* counts, int n) {
	return ((int64_t (*)(int, const int64_t*, int))f)(dtype, counts, n);
}
static int64_t zc_rws(void* f, int dtype, int64_t numel, int nsrc) {
	return ((int64_t (*)(int, int64_t, int))f)(dtype, numel, nsrc);
}
static int zc_slots(void* f, int dtype, const int64_t* counts, int n, int64_t* offs) {
	return ((zccl_status (*)(int, const int64_t*, int, int64_t*))f)(dtype, counts, n, offs);
}
static int zc_malloc(void* f, zccl_ctx* c, void** p, int64_t n) {
	return ((zccl_status (*)(zccl_ctx*, void**, int64_t))f)(c, p, n);
}
static int zc_free(void* f, zccl_ctx* c, void* p) { return ((zccl_status (*)(zccl_ctx*, void*))f)(c, p); }
static int zc_memcpy(void* f, zccl_ctx* c, void* d, const void* s, int64_t n, int kind) {
	return ((zccl_status (*)(zccl_ctx*, void*, const void*, int64_t, int))f)(c, d, s, n, kind);
}
static int zc_encode(void* f, zccl_ctx* c, int dtype, const void* src, const int64_t* counts, int n, void* out,
                     const int64_t* offs, int64_t* lens, void* ws, int64_t wsn) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, const int64_t*, int, void*, const int64_t*, int64_t*, void*,
	                         int64_t, zccl_stream_t, unsigned))f)(c, dtype, src, counts, n, out, offs, lens, ws, wsn, 0,
	                                                              ZCCL_FLAG_SYNC);
}
static int zc_decode(void* f, zccl_ctx* c, int dtype, const void* in, const int64_t* offs, const int64_t* caps,
                     const int64_t* counts, int n, void* dst, void* ws, int64_t wsn) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, const int64_t*, const int64_t*, const int64_t*, int, void*,
	                         void*, int64_t, zccl_stream_t, unsigned))f)(c, dtype, in, offs, caps, counts, n, dst, ws,
	                                                                      wsn, 0, ZCCL_FLAG_SYNC);
}
static int zc_reduce(void* f, zccl_ctx* c, int dtype, int op, const zccl_source* srcs, int nsrc, int64_t numel,
                     void* dst, void* ws, int64_t wsn) {
	return ((zccl_status (*)(zccl_ctx*, int, int, const zccl_source*, int, int64_t, void*, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, dtype, op, srcs, nsrc, numel, dst, ws, wsn, 0, ZCCL_FLAG_SYNC);
}
static int64_t zc_qmain(void* f, int mode, int64_t numel, int block) {
	return ((int64_t (*)(int, int64_t, int))f)(mode, numel, block);
}
static int64_t zc_qws(void* f, int64_t numel) { return ((int64_t (*)(int64_t))f)(numel); }
static int zc_qencode(void* f, zccl_ctx* c, int dtype, int mode, int block, const void* src, int64_t numel,
                      void* main_out, void* exact_out, int64_t exact_cap, int64_t* lens, void* ws, int64_t wsn) {
	return ((zccl_status (*)(zccl_ctx*, int, int, int, const void*, int64_t, void*, void*, int64_t, int64_t*, void*,
	                         int64_t, zccl_stream_t, unsigned))f)(c, dtype, mode, block, src, numel, main_out, exact_out,
	                                                              exact_cap, lens, ws, wsn, 0, ZCCL_FLAG_SYNC);
}
static int zc_qdecode(void* f, zccl_ctx* c, const void* main_in, int64_t main_len, const void* exact_in,
                      int64_t exact_len, int dtype, int64_t numel, void* dst, void* ws, int64_t wsn) {
	return ((zccl_status (*)(zccl_ctx*, const void*, int64_t, const void*, int64_t, int, int64_t, void*, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, main_in, main_len, exact_in, exact_len, dtype, numel, dst, ws,
	                                                      wsn, 0, ZCCL_FLAG_SYNC);
}
static int zc_qaccum(void* f, zccl_ctx* c, const void* main_in, int64_t main_len, const void* exact_in,
                     int64_t exact_len, int64_t numel, void* acc, int first, void* ws, int64_t wsn) {
	return ((zccl_status (*)(zccl_ctx*, const void*, int64_t, const void*, int64_t, int64_t, float*, int, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, main_in, main_len, exact_in, exact_len, numel, (float*)acc,
	                                                      first, ws, wsn, 0, ZCCL_FLAG_SYNC);
}
static int zc_qadd(void* f, zccl_ctx* c, int dtype, const void* src, int64_t numel, void* acc, int first) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, int64_t, float*, int, zccl_stream_t, unsigned))f)(
	    c, dtype, src, numel, (float*)acc, first, 0, ZCCL_FLAG_SYNC);
}
static int zc_qfinish(void* f, zccl_ctx* c, const void* acc, int64_t numel, int div, int dtype, void* dst) {
	return ((zccl_status (*)(zccl_ctx*, const float*, int64_t, int, int, void*, zccl_stream_t, unsigned))f)(
	    c, (const float*)acc, numel, div, dtype, dst, 0, ZCCL_FLAG_SYNC);
}
static void zc_set_source(zccl_source* s, int kind, void* a, int64_t len) {
	s->kind = kind;
	s->a = a;
	s->b = 0;
	s->len = len;
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Lib is libzipccl_cuda.so (or its CPU emulation) opened with dlopen.
type Lib struct {
	h   unsafe.Pointer
	ctx *C.zccl_ctx
	fn  map[string]unsafe.Pointer
}

var names = []string{
	"zccl_device_count", "zccl_build_info", "zccl_last_error", "zccl_ctx_create", "zccl_zip3_static_len",
	"zccl_max_frame_len", "zccl_frame_slots", "zccl_encode_workspace_size", "zccl_decode_workspace_size",
	"zccl_reduce_workspace_size", "zccl_malloc", "zccl_free", "zccl_memcpy", "zccl_encode_frames",
	"zccl_decode_frames", "zccl_decode_reduce", "zccl_quant_main_len", "zccl_quant_workspace_size",
	"zccl_quant_encode", "zccl_quant_decode", "zccl_quant_accumulate", "zccl_quant_add_exact", "zccl_quant_finish",
}

// ErrNoDevice: the library loaded but sees no CUDA device.
var ErrNoDevice = errors.New("no CUDA device")

// Open loads the library; it returns ErrNoDevice when there is no GPU.
func Open(path string) (*Lib, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var cerr *C.char
	h := C.zc_open(cp, &cerr)
	if h == nil {
		return nil, fmt.Errorf("dlopen %s: %s", path, C.GoString(cerr))
	}
	l := &Lib{h: h, fn: map[string]unsafe.Pointer{}}
	for _, n := range names {
		cn := C.CString(n)
		p := C.zc_sym(h, cn)
		C.free(unsafe.Pointer(cn))
		if p == nil {
			return nil, fmt.Errorf("%s: symbol %s missing", path, n)
		}
		l.fn[n] = p
	}
	if C.zc_device_count(l.fn["zccl_device_count"]) < 1 {
		return nil, ErrNoDevice
	}
	if st := C.zc_ctx_create(l.fn["zccl_ctx_create"], 0, &l.ctx); st != 0 {
		return nil, l.err(st)
	}
	return l, nil
}

// BuildInfo describes the library.
func (l *Lib) BuildInfo() string { return C.GoString(C.zc_string(l.fn["zccl_build_info"])) }

// StatusError is a non-zero zccl_status.
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return fmt.Sprintf("zccl status %d: %s", e.Status, e.Msg) }

func (l *Lib) err(st C.int) error {
	return &StatusError{int(st), C.GoString(C.zc_string(l.fn["zccl_last_error"]))}
}

// device is a device allocation.
type device struct {
	l *Lib
	p unsafe.Pointer
	n int64
}

func (l *Lib) alloc(n int64) (*device, error) {
	var p unsafe.Pointer
	if st := C.zc_malloc(l.fn["zccl_malloc"], l.ctx, &p, C.int64_t(n)); st != 0 {
		return nil, l.err(st)
	}
	return &device{l, p, n}, nil
}

func (d *device) free() { C.zc_free(d.l.fn["zccl_free"], d.l.ctx, d.p) }

func (d *device) put(off int64, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	pb := C.CBytes(b)
	defer C.free(pb)
	if st := C.zc_memcpy(d.l.fn["zccl_memcpy"], d.l.ctx, unsafe.Add(d.p, off), pb, C.int64_t(len(b)), 1); st != 0 {
		return d.l.err(st)
	}
	return nil
}

func (d *device) get(off, n int64) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	pb := C.malloc(C.size_t(n))
	defer C.free(pb)
	if st := C.zc_memcpy(d.l.fn["zccl_memcpy"], d.l.ctx, pb, unsafe.Add(d.p, off), C.int64_t(n), 2); st != 0 {
		return nil, d.l.err(st)
	}
	return C.GoBytes(pb, C.int(n)), nil
}

func cInts(v []int64) (*C.int64_t, func()) {
	p := C.malloc(C.size_t(8 * (len(v) + 1)))
	s := unsafe.Slice((*int64)(p), len(v)+1)
	copy(s, v)
	return (*C.int64_t)(p), func() { C.free(p) }
}

// Encode encodes src (sum(counts) elements of dtype) cut into chunks and
// returns one frame per chunk.
func (l *Lib) Encode(dtype int, src []byte, counts []int64) ([][]byte, error) {
	cc, freeC := cInts(counts)
	defer freeC()
	offs := make([]int64, len(counts)+1)
	co, freeO := cInts(offs)
	defer freeO()
	if st := C.zc_slots(l.fn["zccl_frame_slots"], C.int(dtype), cc, C.int(len(counts)), co); st != 0 {
		return nil, l.err(st)
	}
	copy(offs, unsafe.Slice((*int64)(unsafe.Pointer(co)), len(offs)))
	in, err := l.alloc(int64(len(src)) + 1)
	if err != nil {
		return nil, err
	}
	defer in.free()
	if err := in.put(0, src); err != nil {
		return nil, err
	}
	out, err := l.alloc(offs[len(counts)] + 1)
	if err != nil {
		return nil, err
	}
	defer out.free()
	lens, err := l.alloc(int64(8*len(counts)) + 8)
	if err != nil {
		return nil, err
	}
	defer lens.free()
	wsn := int64(C.zc_ws(l.fn["zccl_encode_workspace_size"], C.int(dtype), cc, C.int(len(counts))))
	ws, err := l.alloc(wsn)
	if err != nil {
		return nil, err
	}
	defer ws.free()
	if st := C.zc_encode(l.fn["zccl_encode_frames"], l.ctx, C.int(dtype), in.p, cc, C.int(len(counts)), out.p, co,
		(*C.int64_t)(lens.p), ws.p, C.int64_t(wsn)); st != 0 {
		return nil, l.err(st)
	}
	lb, err := lens.get(0, int64(8*len(counts)))
	if err != nil {
		return nil, err
	}
	frames := make([][]byte, len(counts))
	for k := range counts {
		n := int64(uint64(lb[8*k]) | uint64(lb[8*k+1])<<8 | uint64(lb[8*k+2])<<16 | uint64(lb[8*k+3])<<24 |
			uint64(lb[8*k+4])<<32 | uint64(lb[8*k+5])<<40 | uint64(lb[8*k+6])<<48 | uint64(lb[8*k+7])<<56)
		if frames[k], err = out.get(offs[k], n); err != nil {
			return nil, err
		}
	}
	return frames, nil
}

// Decode decodes frames into sum(counts) elements.
func (l *Lib) Decode(dtype, size int, frames [][]byte, counts []int64) ([]byte, error) {
	offs := make([]int64, len(frames))
	caps := make([]int64, len(frames))
	var total, elems int64
	for k, f := range frames {
		offs[k] = total
		caps[k] = int64(len(f))
		total += (int64(len(f)) + 127) &^ 127
	}
	for _, c := range counts {
		elems += c
	}
	in, err := l.alloc(total + 1)
	if err != nil {
		return nil, err
	}
	defer in.free()
	for k, f := range frames {
		if err := in.put(offs[k], f); err != nil {
			return nil, err
		}
	}
	dst, err := l.alloc(elems*int64(size) + 1)
	if err != nil {
		return nil, err
	}
	defer dst.free()
	cc, f1 := cInts(counts)
	defer f1()
	co, f2 := cInts(offs)
	defer f2()
	ca, f3 := cInts(caps)
	defer f3()
	wsn := int64(C.zc_ws(l.fn["zccl_decode_workspace_size"], C.int(dtype), cc, C.int(len(counts))))
	ws, err := l.alloc(wsn)
	if err != nil {
		return nil, err
	}
	defer ws.free()
	if st := C.zc_decode(l.fn["zccl_decode_frames"], l.ctx, C.int(dtype), in.p, co, ca, cc, C.int(len(counts)), dst.p,
		ws.p, C.int64_t(wsn)); st != 0 {
		return nil, l.err(st)
	}
	return dst.get(0, elems*int64(size))
}

// DecodeReduce reduces the frames (each numel elements) in rank order.
func (l *Lib) DecodeReduce(dtype, size, op int, frames [][]byte, numel int64) ([]byte, error) {
	srcs := (*C.zccl_source)(C.malloc(C.size_t(unsafe.Sizeof(C.zccl_source{})) * C.size_t(len(frames))))
	defer C.free(unsafe.Pointer(srcs))
	ss := unsafe.Slice(srcs, len(frames))
	for r, f := range frames {
		d, err := l.alloc(int64(len(f)) + 1)
		if err != nil {
			return nil, err
		}
		defer d.free()
		if err := d.put(0, f); err != nil {
			return nil, err
		}
		C.zc_set_source(&ss[r], C.ZCCL_SRC_FRAME, d.p, C.int64_t(len(f)))
	}
	dst, err := l.alloc(numel*int64(size) + 1)
	if err != nil {
		return nil, err
	}
	defer dst.free()
	wsn := int64(C.zc_rws(l.fn["zccl_reduce_workspace_size"], C.int(dtype), C.int64_t(numel), C.int(len(frames))))
	ws, err := l.alloc(wsn)
	if err != nil {
		return nil, err
	}
	defer ws.free()
	if st := C.zc_reduce(l.fn["zccl_decode_reduce"], l.ctx, C.int(dtype), C.int(op), srcs, C.int(len(frames)),
		C.int64_t(numel), dst.p, ws.p, C.int64_t(wsn)); st != 0 {
		return nil, l.err(st)
	}
	return dst.get(0, numel*int64(size))
}

// QuantEncode codes numel elements of dtype (src) with mode in blocks of
// block elements and returns the main and exact parts.
func (l *Lib) QuantEncode(dtype, mode, block int, src []byte, numel int64) (main, exact []byte, err error) {
	ml := int64(C.zc_qmain(l.fn["zccl_quant_main_len"], C.int(mode), C.int64_t(numel), C.int(block)))
	if ml < 0 {
		return nil, nil, fmt.Errorf("zccl_quant_main_len(%d, %d, %d) = %d", mode, numel, block, ml)
	}
	in, err := l.alloc(int64(len(src)) + 1)
	if err != nil {
		return nil, nil, err
	}
	defer in.free()
	if err := in.put(0, src); err != nil {
		return nil, nil, err
	}
	// main then exact in one buffer, as one transport message
	out, err := l.alloc(ml + int64(len(src)) + 1)
	if err != nil {
		return nil, nil, err
	}
	defer out.free()
	lens, err := l.alloc(8)
	if err != nil {
		return nil, nil, err
	}
	defer lens.free()
	ws, err := l.quantWorkspace(numel)
	if err != nil {
		return nil, nil, err
	}
	defer ws.free()
	if st := C.zc_qencode(l.fn["zccl_quant_encode"], l.ctx, C.int(dtype), C.int(mode), C.int(block), in.p,
		C.int64_t(numel), out.p, unsafe.Add(out.p, ml), C.int64_t(len(src)), (*C.int64_t)(lens.p), ws.p,
		C.int64_t(ws.n)); st != 0 {
		return nil, nil, l.err(st)
	}
	lb, err := lens.get(0, 8)
	if err != nil {
		return nil, nil, err
	}
	el := int64(binary.LittleEndian.Uint64(lb))
	all, err := out.get(0, ml+el)
	if err != nil {
		return nil, nil, err
	}
	return all[:ml], all[ml:], nil
}

func (l *Lib) quantWorkspace(numel int64) (*device, error) {
	n := int64(C.zc_qws(l.fn["zccl_quant_workspace_size"], C.int64_t(numel)))
	if n < 0 {
		return nil, fmt.Errorf("zccl_quant_workspace_size(%d) = %d", numel, n)
	}
	return l.alloc(n)
}

// putMessage copies a message's parts to the device.
func (l *Lib) putMessage(main, exact []byte) (*device, *device, error) {
	dm, err := l.alloc(int64(len(main)) + 1)
	if err != nil {
		return nil, nil, err
	}
	de, err := l.alloc(int64(len(exact)) + 1)
	if err != nil {
		dm.free()
		return nil, nil, err
	}
	if err := dm.put(0, main); err != nil {
		return nil, nil, err
	}
	if err := de.put(0, exact); err != nil {
		return nil, nil, err
	}
	return dm, de, nil
}

// QuantDecode decodes a message of numel elements into dtype (size bytes
// each).
func (l *Lib) QuantDecode(main, exact []byte, dtype, size int, numel int64) ([]byte, error) {
	dm, de, err := l.putMessage(main, exact)
	if err != nil {
		return nil, err
	}
	defer dm.free()
	defer de.free()
	dst, err := l.alloc(numel*int64(size) + 1)
	if err != nil {
		return nil, err
	}
	defer dst.free()
	ws, err := l.quantWorkspace(numel)
	if err != nil {
		return nil, err
	}
	defer ws.free()
	if st := C.zc_qdecode(l.fn["zccl_quant_decode"], l.ctx, dm.p, C.int64_t(len(main)), de.p, C.int64_t(len(exact)),
		C.int(dtype), C.int64_t(numel), dst.p, ws.p, C.int64_t(ws.n)); st != 0 {
		return nil, l.err(st)
	}
	return dst.get(0, numel*int64(size))
}

// QuantAccumulate adds a message's values to acc (float32 values as
// bytes, little-endian), or sets them with first, and returns the result.
func (l *Lib) QuantAccumulate(main, exact []byte, acc []byte, first bool) ([]byte, error) {
	dm, de, err := l.putMessage(main, exact)
	if err != nil {
		return nil, err
	}
	defer dm.free()
	defer de.free()
	numel := int64(len(acc) / 4)
	da, err := l.alloc(int64(len(acc)) + 1)
	if err != nil {
		return nil, err
	}
	defer da.free()
	if err := da.put(0, acc); err != nil {
		return nil, err
	}
	ws, err := l.quantWorkspace(numel)
	if err != nil {
		return nil, err
	}
	defer ws.free()
	f := C.int(0)
	if first {
		f = 1
	}
	if st := C.zc_qaccum(l.fn["zccl_quant_accumulate"], l.ctx, dm.p, C.int64_t(len(main)), de.p, C.int64_t(len(exact)),
		C.int64_t(numel), da.p, f, ws.p, C.int64_t(ws.n)); st != 0 {
		return nil, l.err(st)
	}
	return da.get(0, int64(len(acc)))
}

// QuantAddExact adds src (numel elements of dtype) widened to acc (float32
// values as bytes), or sets acc to them with first, and returns the result.
func (l *Lib) QuantAddExact(dtype int, src []byte, acc []byte, first bool) ([]byte, error) {
	numel := int64(len(acc) / 4)
	ds, err := l.alloc(int64(len(src)) + 1)
	if err != nil {
		return nil, err
	}
	defer ds.free()
	da, err := l.alloc(int64(len(acc)) + 1)
	if err != nil {
		return nil, err
	}
	defer da.free()
	if err := ds.put(0, src); err != nil {
		return nil, err
	}
	if err := da.put(0, acc); err != nil {
		return nil, err
	}
	f := C.int(0)
	if first {
		f = 1
	}
	if st := C.zc_qadd(l.fn["zccl_quant_add_exact"], l.ctx, C.int(dtype), ds.p, C.int64_t(numel), da.p, f); st != 0 {
		return nil, l.err(st)
	}
	return da.get(0, int64(len(acc)))
}

// QuantFinish returns acc (float32 values as bytes) divided by div (when
// more than 1) and rounded to dtype (size bytes an element).
func (l *Lib) QuantFinish(acc []byte, div, dtype, size int) ([]byte, error) {
	numel := int64(len(acc) / 4)
	da, err := l.alloc(int64(len(acc)) + 1)
	if err != nil {
		return nil, err
	}
	defer da.free()
	dd, err := l.alloc(numel*int64(size) + 1)
	if err != nil {
		return nil, err
	}
	defer dd.free()
	if err := da.put(0, acc); err != nil {
		return nil, err
	}
	if st := C.zc_qfinish(l.fn["zccl_quant_finish"], l.ctx, da.p, C.int64_t(numel), C.int(div), C.int(dtype), dd.p); st != 0 {
		return nil, l.err(st)
	}
	return dd.get(0, numel*int64(size))
}
