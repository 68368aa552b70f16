// zc_launch.h: per-dtype kernel launchers, defined in zc_kernels.cu (compiled
// once per dtype so that the five instantiations build in parallel), and the
// quantization kernels' launchers (zc_quant.cu), called by the CUDA backend
// in zc_cuda.cu.
#pragma once

#include <cuda_runtime.h>

#include "zc_kernels.h"
#include "zc_quant.h"

namespace zc_launch {

template <int DT>
cudaError_t encode(const zc::EncParams& p, int grid, cudaStream_t s);
template <int DT>
cudaError_t fallback(const zc::EncParams& p, int grid, cudaStream_t s);
// Decode, or decode+reduce when p.nsrc > 1 (a kernel of its own).
template <int DT>
cudaError_t decode(const zc::DecParams& p, int grid, size_t smem, cudaStream_t s);
// Resident CTAs per SM (0: encode, 1: decode, 2: decode+reduce, with `smem` bytes).
template <int DT>
cudaError_t occupancy(int which, size_t smem, int* per_sm);

#define ZC_DECLARE_LAUNCHERS(DT)                                                          \
  template <>                                                                             \
  cudaError_t encode<DT>(const zc::EncParams& p, int grid, cudaStream_t s);               \
  template <>                                                                             \
  cudaError_t fallback<DT>(const zc::EncParams& p, int grid, cudaStream_t s);             \
  template <>                                                                             \
  cudaError_t decode<DT>(const zc::DecParams& p, int grid, size_t smem, cudaStream_t s);  \
  template <>                                                                             \
  cudaError_t occupancy<DT>(int which, size_t smem, int* per_sm);
ZC_DECLARE_LAUNCHERS(zc::DT_BF16)
ZC_DECLARE_LAUNCHERS(zc::DT_F16)
ZC_DECLARE_LAUNCHERS(zc::DT_F32)
ZC_DECLARE_LAUNCHERS(zc::DT_E4M3)
ZC_DECLARE_LAUNCHERS(zc::DT_E5M2)
#undef ZC_DECLARE_LAUNCHERS

// The lossy quantization kernels (zc_quant.cu), by p.op.
cudaError_t quant(const zc::QuantParams& p, int grid, cudaStream_t s);
// Resident CTAs per SM of the kernel of op (zc::QOP_*).
cudaError_t quant_occupancy(int op, int* per_sm);

}  // namespace zc_launch
