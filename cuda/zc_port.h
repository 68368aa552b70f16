// zc_port.h: the only place where the kernels touch CUDA-specific
// intrinsics. Under nvcc's device pass every function maps to the CUDA
// intrinsic; under a plain host compiler (g++) it maps to the CPU emulator in
// tests/cuda_emu/ (warps as arrays of 32 lanes run as fibers, blocks as
// loops), so the kernel bodies in zc_kernels.h run unchanged on the CPU.
// Under nvcc's host pass the bodies below are never called (kernels are not
// compiled for the host); they return dummies so that everything compiles.
#pragma once

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define ZC_HD __host__ __device__
#define ZC_INLINE __forceinline__
#else
#define ZC_HD
#define ZC_INLINE inline __attribute__((always_inline))
#endif

#if defined(__CUDA_ARCH__)
#define ZC_UNROLL _Pragma("unroll")
#else
#define ZC_UNROLL
#endif

#if defined(__CUDA_ARCH__)
#define ZC_DEVICE_PASS 1
#else
#define ZC_DEVICE_PASS 0
#endif

#if !defined(__CUDACC__)
// Emulator hooks (tests/cuda_emu/emu.cpp). Every call is made by the fiber
// of the emulated thread that executes it.
namespace zc_emu {
unsigned tid();
unsigned ntid();
unsigned bid();
unsigned nbid();
uint32_t ballot(bool pred);
uint32_t shfl(uint32_t v, int src_lane);
uint32_t shfl_up(uint32_t v, unsigned delta);
uint32_t shfl_down(uint32_t v, unsigned delta);
uint32_t shfl_xor(uint32_t v, unsigned mask);
void syncthreads();
void syncwarp();
void spin_pause();
unsigned char* smem();
void check_vector_access(const void* p, unsigned bytes);
}  // namespace zc_emu
#endif

namespace zc {

struct U4 {
  uint32_t x, y, z, w;
};

ZC_HD ZC_INLINE unsigned tid() {
#if ZC_DEVICE_PASS
  return threadIdx.x;
#elif defined(__CUDACC__)
  return 0;
#else
  return zc_emu::tid();
#endif
}

ZC_HD ZC_INLINE unsigned ntid() {
#if ZC_DEVICE_PASS
  return blockDim.x;
#elif defined(__CUDACC__)
  return 1;
#else
  return zc_emu::ntid();
#endif
}

ZC_HD ZC_INLINE unsigned bid() {
#if ZC_DEVICE_PASS
  return blockIdx.x;
#elif defined(__CUDACC__)
  return 0;
#else
  return zc_emu::bid();
#endif
}

ZC_HD ZC_INLINE unsigned nbid() {
#if ZC_DEVICE_PASS
  return gridDim.x;
#elif defined(__CUDACC__)
  return 1;
#else
  return zc_emu::nbid();
#endif
}

ZC_HD ZC_INLINE unsigned lane() { return tid() & 31u; }
ZC_HD ZC_INLINE unsigned warp() { return tid() >> 5; }

// Bit i set for every lane i below this one.
ZC_HD ZC_INLINE uint32_t lanemask_lt() { return (1u << lane()) - 1u; }

ZC_HD ZC_INLINE uint32_t ballot(bool p) {
#if ZC_DEVICE_PASS
  return __ballot_sync(0xffffffffu, p);
#elif defined(__CUDACC__)
  return p ? 1u : 0u;
#else
  return zc_emu::ballot(p);
#endif
}

ZC_HD ZC_INLINE uint32_t shfl(uint32_t v, int src) {
#if ZC_DEVICE_PASS
  return __shfl_sync(0xffffffffu, v, src);
#elif defined(__CUDACC__)
  return v + 0 * src;
#else
  return zc_emu::shfl(v, src);
#endif
}

ZC_HD ZC_INLINE uint32_t shfl_up(uint32_t v, unsigned d) {
#if ZC_DEVICE_PASS
  return __shfl_up_sync(0xffffffffu, v, d);
#elif defined(__CUDACC__)
  return v + 0 * d;
#else
  return zc_emu::shfl_up(v, d);
#endif
}

ZC_HD ZC_INLINE uint32_t shfl_down(uint32_t v, unsigned d) {
#if ZC_DEVICE_PASS
  return __shfl_down_sync(0xffffffffu, v, d);
#elif defined(__CUDACC__)
  return v + 0 * d;
#else
  return zc_emu::shfl_down(v, d);
#endif
}

ZC_HD ZC_INLINE uint32_t shfl_xor(uint32_t v, unsigned m) {
#if ZC_DEVICE_PASS
  return __shfl_xor_sync(0xffffffffu, v, m);
#elif defined(__CUDACC__)
  return v + 0 * m;
#else
  return zc_emu::shfl_xor(v, m);
#endif
}

ZC_HD ZC_INLINE uint64_t shfl_xor64(uint64_t v, unsigned m) {
  uint32_t lo = shfl_xor((uint32_t)v, m);
  uint32_t hi = shfl_xor((uint32_t)(v >> 32), m);
  return ((uint64_t)hi << 32) | lo;
}

ZC_HD ZC_INLINE uint64_t shfl64(uint64_t v, int src) {
  uint32_t lo = shfl((uint32_t)v, src);
  uint32_t hi = shfl((uint32_t)(v >> 32), src);
  return ((uint64_t)hi << 32) | lo;
}

ZC_HD ZC_INLINE void sync() {
#if ZC_DEVICE_PASS
  __syncthreads();
#elif defined(__CUDACC__)
#else
  zc_emu::syncthreads();
#endif
}

ZC_HD ZC_INLINE void syncwarp() {
#if ZC_DEVICE_PASS
  __syncwarp(0xffffffffu);
#elif defined(__CUDACC__)
#else
  zc_emu::syncwarp();
#endif
}

// Called inside spin-wait loops (the decoupled look-back).
ZC_HD ZC_INLINE void spin_pause() {
#if ZC_DEVICE_PASS
#if __CUDA_ARCH__ >= 700
  __nanosleep(64);
#endif
#elif defined(__CUDACC__)
#else
  zc_emu::spin_pause();
#endif
}

// Byte s (0..7) of the 8-byte value hi:lo (one PRMT on the GPU).
ZC_HD ZC_INLINE uint32_t byte_of(uint32_t lo, uint32_t hi, uint32_t s) {
#if ZC_DEVICE_PASS
  return __byte_perm(lo, hi, s & 7u) & 0xFFu;
#else
  const uint64_t v = (uint64_t)hi << 32 | lo;
  return (uint32_t)(v >> (8 * (s & 7u))) & 0xFFu;
#endif
}

ZC_HD ZC_INLINE uint32_t popc(uint32_t x) {
#if ZC_DEVICE_PASS
  return (uint32_t)__popc(x);
#else
  return (uint32_t)__builtin_popcount(x);
#endif
}

// Count of leading zeros; 32 for 0.
ZC_HD ZC_INLINE uint32_t clz(uint32_t x) {
#if ZC_DEVICE_PASS
  return (uint32_t)__clz((int)x);
#else
  return x == 0 ? 32u : (uint32_t)__builtin_clz(x);
#endif
}

// Index of the lowest set bit (x != 0).
ZC_HD ZC_INLINE uint32_t lowest_bit(uint32_t x) {
#if ZC_DEVICE_PASS
  return (uint32_t)(__ffs((int)x) - 1);
#else
  return (uint32_t)__builtin_ctz(x);
#endif
}

// The dynamic shared memory of the block (16-byte aligned).
ZC_HD ZC_INLINE unsigned char* smem() {
#if ZC_DEVICE_PASS
  extern __shared__ __align__(16) unsigned char zc_dynamic_smem[];
  return zc_dynamic_smem;
#elif defined(__CUDACC__)
  return nullptr;
#else
  return zc_emu::smem();
#endif
}

ZC_HD ZC_INLINE uint32_t atomic_add_u32(uint32_t* p, uint32_t v) {
#if ZC_DEVICE_PASS
  return atomicAdd((unsigned int*)p, v);
#else
  uint32_t old = *p;
  *p = old + v;
  return old;
#endif
}

ZC_HD ZC_INLINE uint32_t atomic_cas_u32(uint32_t* p, uint32_t cmp, uint32_t v) {
#if ZC_DEVICE_PASS
  return atomicCAS((unsigned int*)p, cmp, v);
#else
  uint32_t old = *p;
  if (old == cmp) *p = v;
  return old;
#endif
}

// Publish a 64-bit word to other blocks: a single-copy atomic store, with
// no fence. The look-back's state words carry their whole message (a flag
// and a count), so no earlier write needs ordering before them; a fence
// here made thread 0 wait for its own stores of the block, on every block.
ZC_HD ZC_INLINE void store_relaxed_u64(uint64_t* p, uint64_t v) {
#if ZC_DEVICE_PASS
  atomicExch((unsigned long long*)p, (unsigned long long)v);
#else
  *(volatile uint64_t*)p = v;
#endif
}

// Asks for the 128-byte line at p in L2 (no register holds the data).
ZC_HD ZC_INLINE void prefetch_l2(const void* p) {
#if ZC_DEVICE_PASS
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

ZC_HD ZC_INLINE uint64_t load_volatile_u64(const uint64_t* p) {
#if ZC_DEVICE_PASS
  return *(const volatile unsigned long long*)p;
#else
  return *(const volatile uint64_t*)p;
#endif
}

// 16-byte vector load / store (LDG.128 / STG.128, LDS.128 / STS.128). p must
// be 16-byte aligned; the emulator checks it.
ZC_HD ZC_INLINE U4 ld16(const void* p) {
#if ZC_DEVICE_PASS
  uint4 v = *reinterpret_cast<const uint4*>(p);
  U4 r = {v.x, v.y, v.z, v.w};
  return r;
#else
#if !defined(__CUDACC__)
  zc_emu::check_vector_access(p, 16);
#endif
  U4 r;
  memcpy(&r, p, 16);
  return r;
#endif
}

ZC_HD ZC_INLINE void st16(void* p, U4 v) {
#if ZC_DEVICE_PASS
  *reinterpret_cast<uint4*>(p) = make_uint4(v.x, v.y, v.z, v.w);
#else
#if !defined(__CUDACC__)
  zc_emu::check_vector_access(p, 16);
#endif
  memcpy(p, &v, 16);
#endif
}

ZC_HD ZC_INLINE float as_float(uint32_t u) {
#if ZC_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

ZC_HD ZC_INLINE uint32_t as_u32(float f) {
#if ZC_DEVICE_PASS
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

// IEEE single-precision add / multiply / divide, round to nearest even,
// subnormals kept (never contracted into an FMA, never flushed).
ZC_HD ZC_INLINE float fadd_rn(float a, float b) {
#if ZC_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}

ZC_HD ZC_INLINE float fmul_rn(float a, float b) {
#if ZC_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}

ZC_HD ZC_INLINE float fdiv_rn(float a, float b) {
#if ZC_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  volatile float r = a / b;
  return r;
#endif
}

ZC_HD ZC_INLINE float fsub_rn(float a, float b) {
#if ZC_DEVICE_PASS
  return __fsub_rn(a, b);
#else
  volatile float r = a - b;
  return r;
#endif
}

// Correctly rounded square root (IEEE, as Go's float32(math.Sqrt(float64(x))),
// which double rounding cannot change for a float32 x).
ZC_HD ZC_INLINE float fsqrt_rn(float a) {
#if ZC_DEVICE_PASS
  return __fsqrt_rn(a);
#else
  volatile float r = __builtin_sqrtf(a);
  return r;
#endif
}

#if ZC_DEVICE_PASS
// The device's float16 conversions, one instruction each: IEEE round to
// nearest even, subnormals kept. zc_format.h applies x86's rule to NaN.
ZC_HD ZC_INLINE float cvt_f16_f32(uint32_t h) {
  float f;
  const unsigned short s = (unsigned short)h;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
  return f;
}

ZC_HD ZC_INLINE uint32_t cvt_f32_f16(float f) {
  unsigned short s;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(s) : "f"(f));
  return s;
}
#endif

}  // namespace zc
