// emu.h: a CPU emulator of the CUDA execution model, enough for zipccl's
// kernels (cuda/zc_kernels.h). Every emulated thread is a fiber (ucontext);
// warp intrinsics (__ballot_sync, __shfl*_sync, __syncwarp) complete when
// all 32 lanes of the warp have arrived at the same intrinsic, __syncthreads
// when every thread of the block has; blocks run `resident` at a time,
// interleaved with each other, and spin-waits yield. The order in which
// runnable fibers are resumed is a parameter (forward, reverse, seeded
// random): a kernel whose result depends on it has a missing barrier.
//
// Checks: warp intrinsics reached by a diverged warp (different
// intrinsics or shuffle distances), barriers with exited threads,
// deadlocks and live-locks, misaligned 16-byte vector accesses. Shared
// memory starts filled with 0xA5 (CUDA does not zero it). Violations print
// a message and exit with status 3.
//
// Fault injection (to prove the tests can fail): "shfl_up" (off by one
// lane), "shfl" (source lane + 1), "shfl_xor" (partner ^ 1), "ballot"
// (lane 3's bit flipped), "nosync" (__syncthreads does nothing).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <string>

namespace zc_emu {

struct Config {
  int order = 0;      // 0 forward, 1 reverse, 2 random
  uint64_t seed = 1;  // for order 2
  int resident = 2;   // blocks in flight at once
  std::string fault;  // "" or one of the faults above
};

Config& config();

// Runs body once per thread of a grid of `grid` blocks of `block` threads
// with `smem_bytes` of dynamic shared memory per block. Returns when every
// block has finished.
void launch(unsigned grid, unsigned block, size_t smem_bytes, const std::function<void()>& body);

struct Stats {
  uint64_t launches = 0, blocks = 0, warp_ops = 0, barriers = 0, switches = 0, spins = 0;
};
Stats& stats();

[[noreturn]] void violation(const char* fmt, ...);

}  // namespace zc_emu
