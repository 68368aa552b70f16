// ptxas miscompile repro (nvcc 13.0 and 13.2, -O3, sm_90, H100): the
// per-thread partial CRC of zc_kernels.h as it was before the fix (V0:
// old_crc_tile, V1: old_crc_chunk), a generic-only chunk (V2), the old chunk
// behind __noinline__ (V3), and the fixed crc_tile of cuda/zc_kernels.h (V4),
// each checked per thread against the host. Build from the repository root:
//   nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -Icuda ptxas-repro.cu
// ptxas-repro-output.txt is its output with V0-V3 (before V4 was added), and
// with -Xptxas -O0, where every variant is right.
#include <cuda_runtime.h>
#include <stdio.h>
#include <vector>
#include "zc_kernels.h"
using namespace zc;

// The code before the fix.
ZC_HD ZC_INLINE uint32_t old_crc_chunk(const uint32_t* t, const uint8_t* p, int n, int CB) {
  uint32_t c = 0;
  if (n == CB && CB >= 16) {
    for (int k = 0; k < CB; k += 16) {
      const U4 v = ld16(p + k);
      c = crc_update_word(t, c, v.x);
      c = crc_update_word(t, c, v.y);
      c = crc_update_word(t, c, v.z);
      c = crc_update_word(t, c, v.w);
    }
    return c;
  }
  int k = 0;
  for (; k + 4 <= n; k += 4) c = crc_update_word(t, c, *(const uint32_t*)(p + k));
  for (; k < n; k++) c = t[(c ^ p[k]) & 0xFFu] ^ (c >> 8);
  return c;
}
ZC_HD ZC_INLINE void old_crc_tile(CrcAcc& a, const uint32_t* t, const uint32_t* s, const uint8_t* stage, int tb, int TB) {
  int CB = TB / kThreads;
  int c0 = (int)tid() * CB;
  int len = tb - c0;
  len = len < 0 ? 0 : (len > CB ? CB : len);
  uint32_t c = old_crc_chunk(t, stage + c0, len, CB);
  if (tb == TB) {
    a.full = crc_apply_map(s, a.full) ^ c;
  } else {
    a.last = c;
    a.last_len = tb;
  }
}
__device__ __noinline__ uint32_t chunk_noinline(const uint32_t* t, const uint8_t* p, int n, int CB) {
  return old_crc_chunk(t, p, n, CB);
}

__device__ uint32_t chunk_generic(const uint32_t* t, const uint8_t* p, int n) {
  uint32_t c = 0;
  int k = 0;
  for (; k + 4 <= n; k += 4) c = crc_update_word(t, c, *(const uint32_t*)(p + k));
  for (; k < n; k++) c = t[(c ^ p[k]) & 0xFFu] ^ (c >> 8);
  return c;
}

template <int SZ, int V>
__global__ void __launch_bounds__(256, 2) k(const uint32_t* gt, const uint8_t* data, int tb, uint32_t* out) {
  constexpr int TB = kTile * SZ, CB = TB / kThreads;
  __shared__ __align__(16) uint32_t t[1024];
  __shared__ __align__(16) uint8_t stage[TB];
  for (int i = threadIdx.x; i < 1024; i += 256) t[i] = gt[i];
  cta_load(stage, data, tb, TB);
  __syncthreads();
  int c0 = (int)tid() * CB;
  int len = tb - c0;
  len = len < 0 ? 0 : (len > CB ? CB : len);
  uint32_t c;
  if (V == 0) {
    CrcAcc a = {0, 0, 0};
    old_crc_tile(a, t, t, stage, tb, TB);
    c = a.last;
  } else if (V == 1) {
    c = old_crc_chunk(t, stage + c0, len, CB);
  } else if (V == 2) {
    c = chunk_generic(t, stage + c0, len);
  } else if (V == 3) {
    c = chunk_noinline(t, stage + c0, len, CB);
  } else {
    CrcAcc a = {0, 0, 0};
    crc_tile(a, t, t, stage, tb, TB);
    c = a.last;
  }
  out[threadIdx.x] = c;
  out[256 + threadIdx.x] = (uint32_t)len;
}
static uint32_t raw_crc(const uint32_t* t0, const uint8_t* p, int64_t n) {
  uint32_t c = 0;
  for (int64_t i = 0; i < n; i++) c = t0[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c;
}
template <int SZ, int V>
int run(const CrcConsts& cc, const uint32_t* dt, uint8_t* dd, const std::vector<uint8_t>& h, uint32_t* dout) {
  constexpr int TB = kTile * SZ, CB = TB / kThreads;
  int bad = 0;
  for (int tb : {1 * SZ, 2 * SZ, 7 * SZ, 100 * SZ, 1000 * SZ + 2}) {
    k<SZ, V><<<1, 256>>>(dt, dd, tb, dout);
    if (cudaDeviceSynchronize() != cudaSuccess) { printf("launch failed\n"); return 1; }
    std::vector<uint32_t> o(512);
    cudaMemcpy(o.data(), dout, 4 * 512, cudaMemcpyDeviceToHost);
    int nb = 0;
    for (int t = 0; t < 256; t++) {
      int c0 = t * CB, len = tb - c0;
      len = len < 0 ? 0 : (len > CB ? CB : len);
      uint32_t want = raw_crc(cc.t, h.data() + c0, len);
      if (o[t] != want || (int)o[256 + t] != len) {
        if (nb++ < 2) {
          printf("  SZ=%d V=%d tb=%d thread %d len %d(gpu %u): %08x want %08x", SZ, V, tb, t, len, o[256 + t], o[t], want);
          for (int z = 0; z <= CB; z++) {
            std::vector<uint8_t> pad(h.begin() + c0, h.begin() + c0 + len);
            pad.resize(len + z, 0);
            if (raw_crc(cc.t, pad.data(), len + z) == o[t]) printf(" (= +%d zeros)", z);
          }
          printf("\n");
        }
      }
    }
    bad += nb;
  }
  printf("SZ=%d V=%d: %s\n", SZ, V, bad ? "BAD" : "ok");
  return bad;
}
int main() {
  std::vector<CrcConsts> cc(1);
  crc_consts_fill(&cc[0]);
  std::vector<uint8_t> h(8192);
  uint64_t s = 99;
  for (auto& b : h) { s = s * 6364136223846793005ull + 1442695040888963407ull; b = (uint8_t)(s >> 56); }
  uint32_t *dt, *dout; uint8_t* dd;
  cudaMalloc(&dt, 4096); cudaMalloc(&dd, 8192); cudaMalloc(&dout, 4096);
  cudaMemcpy(dt, cc[0].t, 4096, cudaMemcpyHostToDevice);
  cudaMemcpy(dd, h.data(), 8192, cudaMemcpyHostToDevice);
  run<2, 0>(cc[0], dt, dd, h, dout); run<2, 1>(cc[0], dt, dd, h, dout);
  run<2, 2>(cc[0], dt, dd, h, dout); run<2, 3>(cc[0], dt, dd, h, dout);
  run<4, 0>(cc[0], dt, dd, h, dout); run<4, 1>(cc[0], dt, dd, h, dout);
  run<4, 2>(cc[0], dt, dd, h, dout); run<1, 0>(cc[0], dt, dd, h, dout);
  run<2, 4>(cc[0], dt, dd, h, dout); run<4, 4>(cc[0], dt, dd, h, dout);
  return 0;
}
