// zc_quant.cu: the lossy quantization kernels (zc_quant.h), thin __global__
// wrappers over its CTA bodies, and their launchers. One kernel per step,
// so that each one's registers are sized by its own code.
#include "zc_launch.h"

namespace {

__global__ void __launch_bounds__(zc::kThreads) k_qencode(const __grid_constant__ zc::QuantParams p) {
  zc::quant_encode_cta(p);
}

__global__ void __launch_bounds__(zc::kThreads) k_qscan(const __grid_constant__ zc::QuantParams p) {
  zc::quant_scan_cta(p);
}

__global__ void __launch_bounds__(zc::kThreads) k_qcopy(const __grid_constant__ zc::QuantParams p) {
  zc::quant_copy_cta(p);
}

__global__ void __launch_bounds__(zc::kThreads) k_qdecode(const __grid_constant__ zc::QuantParams p) {
  zc::quant_decode_cta(p);
}

__global__ void __launch_bounds__(zc::kThreads) k_qaccum(const __grid_constant__ zc::QuantParams p) {
  zc::quant_accum_cta(p);
}

__global__ void __launch_bounds__(zc::kThreads) k_qadd(const __grid_constant__ zc::QuantParams p) {
  zc::quant_add_exact_cta(p);
}

__global__ void __launch_bounds__(zc::kThreads) k_qfinish(const __grid_constant__ zc::QuantParams p) {
  zc::quant_finish_cta(p);
}

using Kernel = void (*)(const zc::QuantParams);

Kernel kernel_of(int op) {
  switch (op) {
    case zc::QOP_ENCODE: return k_qencode;
    case zc::QOP_SCAN_ENC:
    case zc::QOP_SCAN_DEC: return k_qscan;
    case zc::QOP_COPY: return k_qcopy;
    case zc::QOP_DECODE: return k_qdecode;
    case zc::QOP_ACCUM: return k_qaccum;
    case zc::QOP_ADD_EXACT: return k_qadd;
    case zc::QOP_FINISH: return k_qfinish;
  }
  return nullptr;
}

}  // namespace

namespace zc_launch {

cudaError_t quant(const zc::QuantParams& p, int grid, cudaStream_t s) {
  Kernel k = kernel_of(p.op);
  if (k == nullptr) return cudaErrorInvalidValue;
  k<<<grid, zc::kThreads, zc::quant_smem_bytes(p.op), s>>>(p);
  return cudaGetLastError();
}

cudaError_t quant_occupancy(int op, int* per_sm) {
  Kernel k = kernel_of(op);
  if (k == nullptr) return cudaErrorInvalidValue;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, k, zc::kThreads, zc::quant_smem_bytes(op));
}

}  // namespace zc_launch
