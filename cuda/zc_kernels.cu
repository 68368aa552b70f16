// zc_kernels.cu: the __global__ kernels, thin wrappers over the CTA bodies
// in zc_kernels.h, and their launchers. Compiled once per dtype
// (-DZC_KERNEL_DTYPE_bf16, _f16, _f32, _e4m3, _e5m2).
#include "zc_launch.h"

#if defined(ZC_KERNEL_DTYPE_bf16)
#define ZC_DT zc::DT_BF16
#elif defined(ZC_KERNEL_DTYPE_f16)
#define ZC_DT zc::DT_F16
#elif defined(ZC_KERNEL_DTYPE_f32)
#define ZC_DT zc::DT_F32
#elif defined(ZC_KERNEL_DTYPE_e4m3)
#define ZC_DT zc::DT_E4M3
#elif defined(ZC_KERNEL_DTYPE_e5m2)
#define ZC_DT zc::DT_E5M2
#else
#error "define ZC_KERNEL_DTYPE_<bf16|f16|f32|e4m3|e5m2>"
#endif

namespace {

// 256 threads. Encode of 8- and 16-bit types: four CTAs per SM (64
// registers, 8 bytes of spills at most), whose warps cover each other's
// waits at the window and the look-back: 4 to 24 % faster than two on an
// H100 from 64 MiB up (RESULTS.md (f3)). float32's encode spills 80 or 208
// bytes at 80 or 64 registers and loses 15 to 45 %, so it keeps two.
template <int DT>
constexpr int enc_ctas_per_sm() {
  return zc::fmt_of(DT).size == 4 ? 2 : 4;
}

template <int DT>
__global__ void __launch_bounds__(zc::kThreads, enc_ctas_per_sm<DT>()) k_encode(const __grid_constant__ zc::EncParams p) {
  zc::encode_cta<DT>(p);
}

template <int DT>
__global__ void __launch_bounds__(zc::kThreads, 2) k_fallback(const __grid_constant__ zc::EncParams p) {
  zc::fallback_cta<DT>(p);
}

// Decode and decode+reduce are two kernels of one body (decode_cta), so
// that a plain decode's registers are not sized by the reduce's code. It
// then fits 80 registers at three CTAs per SM, which bfloat16 and the
// float8 types take (decode 1.09 to 1.16x of two from 256 MiB up on an
// H100); float16 (12 bytes of spills) and float32 (76) lose at three and
// keep two (RESULTS.md (f6)). decode+reduce keeps two at 128 registers.
template <int DT>
constexpr int dec_ctas_per_sm() {
  return zc::fmt_of(DT).size == 1 || DT == zc::DT_BF16 ? 3 : 2;
}

template <int DT>
__global__ void __launch_bounds__(zc::kThreads, dec_ctas_per_sm<DT>()) k_decode(const __grid_constant__ zc::DecParams p) {
  zc::decode_cta<DT, false>(p);
}

template <int DT>
__global__ void __launch_bounds__(zc::kThreads, 2) k_reduce(const __grid_constant__ zc::DecParams p) {
  zc::decode_cta<DT, true>(p);
}

// Shared memory above the 48 KiB default needs an opt-in per kernel.
template <class K>
cudaError_t ensure_smem(K kernel, size_t smem) {
  if (smem <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

}  // namespace

namespace zc_launch {

template <>
cudaError_t encode<ZC_DT>(const zc::EncParams& p, int grid, cudaStream_t s) {
  cudaError_t e = ensure_smem(k_encode<ZC_DT>, zc::enc_smem_bytes());
  if (e != cudaSuccess) return e;
  k_encode<ZC_DT><<<grid, zc::kThreads, zc::enc_smem_bytes(), s>>>(p);
  return cudaGetLastError();
}

template <>
cudaError_t fallback<ZC_DT>(const zc::EncParams& p, int grid, cudaStream_t s) {
  cudaError_t e = ensure_smem(k_fallback<ZC_DT>, zc::fb_smem_bytes());
  if (e != cudaSuccess) return e;
  k_fallback<ZC_DT><<<grid, zc::kThreads, zc::fb_smem_bytes(), s>>>(p);
  return cudaGetLastError();
}

template <>
cudaError_t decode<ZC_DT>(const zc::DecParams& p, int grid, size_t smem, cudaStream_t s) {
  auto kernel = p.nsrc > 1 ? k_reduce<ZC_DT> : k_decode<ZC_DT>;
  cudaError_t e = ensure_smem(kernel, smem);
  if (e != cudaSuccess) return e;
  kernel<<<grid, zc::kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <>
cudaError_t occupancy<ZC_DT>(int which, size_t smem, int* per_sm) {
  cudaError_t e;
  if (which == 0) {
    e = ensure_smem(k_encode<ZC_DT>, zc::enc_smem_bytes());
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, k_encode<ZC_DT>, zc::kThreads, zc::enc_smem_bytes());
  } else {
    auto kernel = which == 2 ? k_reduce<ZC_DT> : k_decode<ZC_DT>;
    e = ensure_smem(kernel, smem);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, zc::kThreads, smem);
  }
  return e;
}

}  // namespace zc_launch
