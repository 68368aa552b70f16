// zc_cuda.cu: zc_backend over the CUDA runtime (device queries, memory,
// launches through the per-dtype launchers of zc_kernels.cu). Built by nvcc
// into libzipccl_cuda.so together with zc_api.cpp (see cuda/Makefile).
#include <cuda_runtime.h>
#include <stdio.h>

#include <type_traits>

#include "zc_backend.h"
#include "zc_launch.h"

#ifndef ZC_ARCHS
#define ZC_ARCHS unknown
#endif
#define ZC_STR2(x) #x
#define ZC_STR(x) ZC_STR2(x)

namespace {

int cuda_fail(cudaError_t e, const char* what) {
  zc_backend::set_error("%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return 1;
}

template <class F>
cudaError_t dispatch(int dtype, F&& f) {
  switch (dtype) {
    case zc::DT_BF16: return f(std::integral_constant<int, zc::DT_BF16>());
    case zc::DT_F16: return f(std::integral_constant<int, zc::DT_F16>());
    case zc::DT_F32: return f(std::integral_constant<int, zc::DT_F32>());
    case zc::DT_E4M3: return f(std::integral_constant<int, zc::DT_E4M3>());
    case zc::DT_E5M2: return f(std::integral_constant<int, zc::DT_E5M2>());
  }
  return cudaErrorInvalidValue;
}

}  // namespace

namespace zc_backend {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return n;
}

int set_device(int device) {
  cudaError_t e = cudaSetDevice(device);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaSetDevice");
}

int device_info(int device, DeviceInfo* info) {
  if (set_device(device) != 0) return 1;
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceGetAttribute");
  info->sm_count = sms;
  // encode occupancy depends on the dtype only: asked once here, not per call
  for (int dt : {zc::DT_F32, zc::DT_BF16, zc::DT_F16, zc::DT_E4M3, zc::DT_E5M2}) {
    int n = 0;
    e = dispatch(dt, [&](auto d) { return zc_launch::occupancy<decltype(d)::value>(0, 0, &n); });
    if (e != cudaSuccess) return cuda_fail(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    info->enc_ctas_per_sm[dt] = n < 1 ? 1 : n;
  }
  for (int op = 0; op < zc::kQOps; op++) {
    int n = 0;
    e = zc_launch::quant_occupancy(op, &n);
    if (e != cudaSuccess) return cuda_fail(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    info->quant_ctas_per_sm[op] = n < 1 ? 1 : n;
  }
  return 0;
}

int memset_async(void* p, int value, size_t n, zccl_stream_t s) {
  if (n == 0) return 0;
  cudaError_t e = cudaMemsetAsync(p, value, n, (cudaStream_t)s);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemsetAsync");
}

int memcpy_sync(void* dst, const void* src, size_t n, int kind, zccl_stream_t s) {
  cudaMemcpyKind k = kind == 1 ? cudaMemcpyHostToDevice : kind == 2 ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  cudaError_t e = cudaMemcpyAsync(dst, src, n, k, (cudaStream_t)s);
  if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)s);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpyAsync");
}

int stream_sync(zccl_stream_t s) {
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)s);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamSynchronize");
}

int memcpy_async(void* dst, const void* src, size_t n, int kind, zccl_stream_t s) {
  cudaMemcpyKind k = kind == 1 ? cudaMemcpyHostToDevice : kind == 2 ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  cudaError_t e = cudaMemcpyAsync(dst, src, n, k, (cudaStream_t)s);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpyAsync");
}

int stream_create(zccl_stream_t* s) {
  cudaStream_t st = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  *s = (zccl_stream_t)st;
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamCreateWithFlags");
}

int stream_destroy(zccl_stream_t s) {
  cudaError_t e = cudaStreamDestroy((cudaStream_t)s);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamDestroy");
}

int host_alloc(void** p, size_t n) {
  cudaError_t e = cudaHostAlloc(p, n, cudaHostAllocPortable);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaHostAlloc");
}

int host_free(void* p) {
  cudaError_t e = cudaFreeHost(p);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaFreeHost");
}

int dev_malloc(void** p, size_t n) {
  cudaError_t e = cudaMalloc(p, n);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMalloc");
}

int dev_free(void* p) {
  cudaError_t e = cudaFree(p);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaFree");
}

int launch_encode(int dtype, const zc::EncParams& p, int grid, zccl_stream_t s) {
  cudaError_t e = dispatch(dtype, [&](auto dt) { return zc_launch::encode<decltype(dt)::value>(p, grid, (cudaStream_t)s); });
  return e == cudaSuccess ? 0 : cuda_fail(e, "encode kernel launch");
}

int launch_fallback(int dtype, const zc::EncParams& p, int grid, zccl_stream_t s) {
  cudaError_t e =
      dispatch(dtype, [&](auto dt) { return zc_launch::fallback<decltype(dt)::value>(p, grid, (cudaStream_t)s); });
  return e == cudaSuccess ? 0 : cuda_fail(e, "raw fallback kernel launch");
}

int launch_decode(int dtype, const zc::DecParams& p, int grid, size_t smem, zccl_stream_t s) {
  cudaError_t e =
      dispatch(dtype, [&](auto dt) { return zc_launch::decode<decltype(dt)::value>(p, grid, smem, (cudaStream_t)s); });
  return e == cudaSuccess ? 0 : cuda_fail(e, "decode kernel launch");
}

int launch_quant(const zc::QuantParams& p, int grid, zccl_stream_t s) {
  cudaError_t e = zc_launch::quant(p, grid, (cudaStream_t)s);
  return e == cudaSuccess ? 0 : cuda_fail(e, "quantization kernel launch");
}

int dec_ctas_per_sm(int dtype, size_t smem, bool reduce) {
  int n = 0;
  cudaError_t e =
      dispatch(dtype, [&](auto dt) { return zc_launch::occupancy<decltype(dt)::value>(reduce ? 2 : 1, smem, &n); });
  if (e != cudaSuccess) {
    cuda_fail(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return -1;
  }
  return n < 1 ? 1 : n;
}

const char* build_info() {
  static char buf[256];
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  snprintf(buf, sizeof buf, "libzipccl_cuda ABI %d, nvcc %d.%d, CUDA runtime %d, driver %d, archs %s",
           ZCCL_ABI_VERSION, __CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__, rt, drv, ZC_STR(ZC_ARCHS));
  return buf;
}

}  // namespace zc_backend
