// zc_backend.h: what the C API (zc_api.cpp) needs from a device. Two
// implementations: zc_cuda.cu (the GPU, CUDA runtime) and
// tests/cuda_emu/emu_backend.cpp (the CPU emulator, where "device memory"
// is host memory and launches run the same CTA bodies over an emulated grid).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "zc_kernels.h"
#include "zc_quant.h"
#include "zipccl_cuda.h"

namespace zc_backend {

struct DeviceInfo {
  int sm_count;
  int enc_ctas_per_sm[16];  // resident CTAs of each coded dtype's encode kernel, by dtype code
  int quant_ctas_per_sm[zc::kQOps];  // of each quantization kernel, by zc::QOP_*
};
static_assert(zc::DT_F32 < 16 && zc::DT_BF16 < 16 && zc::DT_F16 < 16 && zc::DT_E4M3 < 16 && zc::DT_E5M2 < 16,
              "DeviceInfo::enc_ctas_per_sm is indexed by dtype code");

// Every function returns 0 on success, or non-zero after storing a message
// with set_error.
int device_count();
int device_info(int device, DeviceInfo* info);
int set_device(int device);
int memset_async(void* p, int value, size_t n, zccl_stream_t s);
int memcpy_sync(void* dst, const void* src, size_t n, int kind, zccl_stream_t s);
int stream_sync(zccl_stream_t s);
int memcpy_async(void* dst, const void* src, size_t n, int kind, zccl_stream_t s);
int stream_create(zccl_stream_t* s);  // non-blocking
int stream_destroy(zccl_stream_t s);
int host_alloc(void** p, size_t n);  // page-locked
int host_free(void* p);
int dev_malloc(void** p, size_t n);
int dev_free(void* p);
int launch_encode(int dtype, const zc::EncParams& p, int grid, zccl_stream_t s);
int launch_fallback(int dtype, const zc::EncParams& p, int grid, zccl_stream_t s);
int launch_decode(int dtype, const zc::DecParams& p, int grid, size_t smem, zccl_stream_t s);
int dec_ctas_per_sm(int dtype, size_t smem, bool reduce);  // occupancy for a given shared-memory size
int launch_quant(const zc::QuantParams& p, int grid, zccl_stream_t s);  // the kernel of p.op
const char* build_info();

void set_error(const char* fmt, ...);

}  // namespace zc_backend
