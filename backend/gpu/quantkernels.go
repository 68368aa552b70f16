package gpu

/*
#cgo CFLAGS: -I${SRCDIR} -I${SRCDIR}/../../cuda
#include <stdint.h>
#include <zipccl_cuda.h>

static int64_t zq_main_len(void* f, int mode, int64_t numel, int block) {
	return ((int64_t (*)(int, int64_t, int))f)(mode, numel, block);
}
static int64_t zq_ws(void* f, int64_t numel) { return ((int64_t (*)(int64_t))f)(numel); }
static int zq_encode(void* f, zccl_ctx* c, int dt, int mode, int block, uintptr_t src, int64_t numel, uintptr_t main_out,
                     uintptr_t exact_out, int64_t exact_cap, uintptr_t d_exact_len, uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, int, int, const void*, int64_t, void*, void*, int64_t, int64_t*, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, dt, mode, block, (const void*)src, numel, (void*)main_out,
	                                                      (void*)exact_out, exact_cap, (int64_t*)d_exact_len, (void*)ws, wsn,
	                                                      (zccl_stream_t)st, 0);
}
static int zq_decode(void* f, zccl_ctx* c, uintptr_t main_in, int64_t main_len, uintptr_t exact_in, int64_t exact_len,
                     int dt, int64_t numel, uintptr_t dst, uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, const void*, int64_t, const void*, int64_t, int, int64_t, void*, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, (const void*)main_in, main_len, (const void*)exact_in, exact_len,
	                                                      dt, numel, (void*)dst, (void*)ws, wsn, (zccl_stream_t)st, 0);
}
static int zq_accumulate(void* f, zccl_ctx* c, uintptr_t main_in, int64_t main_len, uintptr_t exact_in, int64_t exact_len,
                         int64_t numel, uintptr_t acc, int first, uintptr_t ws, int64_t wsn, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, const void*, int64_t, const void*, int64_t, int64_t, float*, int, void*, int64_t,
	                         zccl_stream_t, unsigned))f)(c, (const void*)main_in, main_len, (const void*)exact_in, exact_len,
	                                                      numel, (float*)acc, first, (void*)ws, wsn, (zccl_stream_t)st, 0);
}
static int zq_add_exact(void* f, zccl_ctx* c, int dt, uintptr_t src, int64_t numel, uintptr_t acc, int first, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, int, const void*, int64_t, float*, int, zccl_stream_t, unsigned))f)(
	    c, dt, (const void*)src, numel, (float*)acc, first, (zccl_stream_t)st, 0);
}
static int zq_finish(void* f, zccl_ctx* c, uintptr_t acc, int64_t numel, int div, int dt, uintptr_t dst, uintptr_t st) {
	return ((zccl_status (*)(zccl_ctx*, const float*, int64_t, int, int, void*, zccl_stream_t, unsigned))f)(
	    c, (const float*)acc, numel, div, dt, (void*)dst, (zccl_stream_t)st, 0);
}
*/
import "C"

import (
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/quant"
)

// The lossy quantization entries of the kernel library (zccl_quant_*,
// backend/quant's formats; docs/FORMAT.md 11).
var quantSyms = []string{"zccl_quant_main_len", "zccl_quant_workspace_size", "zccl_quant_encode", "zccl_quant_decode",
	"zccl_quant_accumulate", "zccl_quant_add_exact", "zccl_quant_finish"}

// QuantMainLen is quant.MainLen as the library computes it (-1: refused).
func (k *Kernels) QuantMainLen(mode quant.Mode, numel int64, block int) int64 {
	return int64(C.zq_main_len(k.fn["zccl_quant_main_len"], C.int(mode), C.int64_t(numel), C.int(block)))
}

// QuantWorkspace is the workspace any quant call on numel elements needs.
func (k *Kernels) QuantWorkspace(numel int64) int64 {
	return int64(C.zq_ws(k.fn["zccl_quant_workspace_size"], C.int64_t(numel)))
}

// QuantEncode codes numel elements of dt at src as one message: its main
// part at mainOut, its exact part at exactOut (exactCap bytes), the exact
// part's length (device int64) at exactLen.
func (k *Kernels) QuantEncode(device int, dt dtype.DType, mode quant.Mode, block int, src uintptr, numel int64,
	mainOut, exactOut uintptr, exactCap int64, exactLen, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_quant_encode", C.zq_encode(k.fn["zccl_quant_encode"], c, C.int(dt), C.int(mode), C.int(block),
			C.uintptr_t(src), C.int64_t(numel), C.uintptr_t(mainOut), C.uintptr_t(exactOut), C.int64_t(exactCap),
			C.uintptr_t(exactLen), C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// QuantDecode decodes one message of numel elements into dst as dt; a
// corrupt message is recorded in ws (WorkspaceStatus).
func (k *Kernels) QuantDecode(device int, mainIn uintptr, mainLen int64, exactIn uintptr, exactLen int64, dt dtype.DType,
	numel int64, dst, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_quant_decode", C.zq_decode(k.fn["zccl_quant_decode"], c, C.uintptr_t(mainIn), C.int64_t(mainLen),
			C.uintptr_t(exactIn), C.int64_t(exactLen), C.int(dt), C.int64_t(numel), C.uintptr_t(dst), C.uintptr_t(ws),
			C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// QuantAccumulate adds one message's values (numel) to the float32
// accumulators at acc, or sets them when first; a corrupt message is
// recorded in ws.
func (k *Kernels) QuantAccumulate(device int, mainIn uintptr, mainLen int64, exactIn uintptr, exactLen, numel int64,
	acc uintptr, first bool, ws uintptr, wsLen int64, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_quant_accumulate", C.zq_accumulate(k.fn["zccl_quant_accumulate"], c, C.uintptr_t(mainIn),
			C.int64_t(mainLen), C.uintptr_t(exactIn), C.int64_t(exactLen), C.int64_t(numel), C.uintptr_t(acc), cBool(first),
			C.uintptr_t(ws), C.int64_t(wsLen), C.uintptr_t(stream)))
	})
}

// QuantAddExact adds numel elements of dt at src, widened, to the float32
// accumulators at acc (or sets them when first): a rank's own
// contribution, exact.
func (k *Kernels) QuantAddExact(device int, dt dtype.DType, src uintptr, numel int64, acc uintptr, first bool, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_quant_add_exact", C.zq_add_exact(k.fn["zccl_quant_add_exact"], c, C.int(dt), C.uintptr_t(src),
			C.int64_t(numel), C.uintptr_t(acc), cBool(first), C.uintptr_t(stream)))
	})
}

// QuantFinish writes the float32 accumulators at acc, divided by div when
// it is more than 1, into dst as dt (one rounding; dst may be acc for
// float32).
func (k *Kernels) QuantFinish(device int, acc uintptr, numel int64, div int, dt dtype.DType, dst, stream uintptr) error {
	return k.call(device, func(c *C.zccl_ctx) error {
		return k.fail("zccl_quant_finish", C.zq_finish(k.fn["zccl_quant_finish"], c, C.uintptr_t(acc), C.int64_t(numel),
			C.int(div), C.int(dt), C.uintptr_t(dst), C.uintptr_t(stream)))
	})
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
