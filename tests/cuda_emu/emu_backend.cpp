// emu_backend.cpp: zc_backend over the CPU emulator. "Device memory" is host
// memory, streams are ignored (everything runs at the call), and a launch
// runs the same CTA bodies as the GPU (cuda/zc_kernels.h) over an emulated
// grid. Together with cuda/zc_api.cpp this makes the whole C API run on
// the CPU.
//
// ZCCL_EMU_PROTECT=1 (set by the engine's tests) makes device memory what it
// is on a GPU: unreadable by the host. Every allocation is then its own
// mapping, kept PROT_NONE except while a call of this library runs (the
// engine serializes those calls), so host code that dereferences a device
// pointer faults at once instead of passing unnoticed.
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mutex>
#include <unordered_map>

#include "../../cuda/zc_backend.h"
#include "emu.h"

namespace zc_backend {

namespace {
int g_sms = 2;  // emulated SMs: persistent grids of up to 2 * (CTAs per SM)

bool protect_on() {
  static const bool on = [] {
    const char* v = getenv("ZCCL_EMU_PROTECT");
    return v != nullptr && strcmp(v, "1") == 0;
  }();
  return on;
}

std::mutex g_regions_mu;
std::unordered_map<void*, size_t> g_regions;  // protected allocations: start -> mapped bytes
int g_open = 0;                               // nesting of Open guards

void set_all(int prot) {
  for (auto& [p, n] : g_regions) mprotect(p, n, prot);
}

// Device memory is readable while a call of the library runs.
struct Open {
  Open() {
    if (!protect_on()) return;
    std::lock_guard<std::mutex> l(g_regions_mu);
    if (g_open++ == 0) set_all(PROT_READ | PROT_WRITE);
  }
  ~Open() {
    if (!protect_on()) return;
    std::lock_guard<std::mutex> l(g_regions_mu);
    if (--g_open == 0) set_all(PROT_NONE);
  }
};

int fake_stream = 0;  // streams are ignored; a distinct non-null handle
}  // namespace

int device_count() { return 1; }

int device_info(int device, DeviceInfo* info) {
  if (device != 0) {
    set_error("emulator: no device %d", device);
    return 1;
  }
  info->sm_count = g_sms;
  for (int& n : info->enc_ctas_per_sm) n = 1;
  for (int& n : info->quant_ctas_per_sm) n = 1;
  return 0;
}

int set_device(int) { return 0; }

int memset_async(void* p, int value, size_t n, zccl_stream_t) {
  Open open;
  memset(p, value, n);
  return 0;
}

int memcpy_sync(void* dst, const void* src, size_t n, int, zccl_stream_t) {
  Open open;
  memmove(dst, src, n);
  return 0;
}

int memcpy_async(void* dst, const void* src, size_t n, int kind, zccl_stream_t s) {
  return memcpy_sync(dst, src, n, kind, s);
}

int stream_sync(zccl_stream_t) { return 0; }

int stream_create(zccl_stream_t* s) {
  *s = (zccl_stream_t)&fake_stream;
  return 0;
}

int stream_destroy(zccl_stream_t) { return 0; }

int host_alloc(void** p, size_t n) {
  *p = aligned_alloc(256, (n + 255) / 256 * 256);
  if (*p == nullptr) {
    set_error("emulator: out of memory");
    return 1;
  }
  return 0;
}

int host_free(void* p) {
  free(p);
  return 0;
}

int dev_malloc(void** p, size_t n) {
  if (protect_on()) {
    size_t bytes = (n + 4095) / 4096 * 4096;
    void* m = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      set_error("emulator: out of memory");
      return 1;
    }
    std::lock_guard<std::mutex> l(g_regions_mu);
    if (g_open > 0) mprotect(m, bytes, PROT_READ | PROT_WRITE);
    g_regions[m] = bytes;
    *p = m;
    return 0;
  }
  return host_alloc(p, n);
}

int dev_free(void* p) {
  if (protect_on()) {
    std::lock_guard<std::mutex> l(g_regions_mu);
    auto it = g_regions.find(p);
    if (it != g_regions.end()) {
      munmap(p, it->second);
      g_regions.erase(it);
      return 0;
    }
  }
  free(p);
  return 0;
}

template <class F>
int dispatch(int dtype, F&& f) {
  switch (dtype) {
    case zc::DT_BF16: f(std::integral_constant<int, zc::DT_BF16>()); return 0;
    case zc::DT_F16: f(std::integral_constant<int, zc::DT_F16>()); return 0;
    case zc::DT_F32: f(std::integral_constant<int, zc::DT_F32>()); return 0;
    case zc::DT_E4M3: f(std::integral_constant<int, zc::DT_E4M3>()); return 0;
    case zc::DT_E5M2: f(std::integral_constant<int, zc::DT_E5M2>()); return 0;
  }
  set_error("emulator: dtype %d", dtype);
  return 1;
}

int launch_encode(int dtype, const zc::EncParams& p, int grid, zccl_stream_t) {
  Open open;
  return dispatch(dtype, [&](auto dt) {
    zc_emu::launch((unsigned)grid, zc::kThreads, zc::enc_smem_bytes(), [&] { zc::encode_cta<decltype(dt)::value>(p); });
  });
}

int launch_fallback(int dtype, const zc::EncParams& p, int grid, zccl_stream_t) {
  Open open;
  return dispatch(dtype, [&](auto dt) {
    zc_emu::launch((unsigned)grid, zc::kThreads, zc::fb_smem_bytes(), [&] { zc::fallback_cta<decltype(dt)::value>(p); });
  });
}

int launch_decode(int dtype, const zc::DecParams& p, int grid, size_t smem, zccl_stream_t) {
  Open open;
  return dispatch(dtype, [&](auto dt) {
    zc_emu::launch((unsigned)grid, zc::kThreads, smem, [&] {
      if (p.nsrc > 1) {
        zc::decode_cta<decltype(dt)::value, true>(p);
      } else {
        zc::decode_cta<decltype(dt)::value, false>(p);
      }
    });
  });
}

int launch_quant(const zc::QuantParams& p, int grid, zccl_stream_t) {
  Open open;
  zc_emu::launch((unsigned)grid, zc::kThreads, zc::quant_smem_bytes(p.op), [&] { zc::quant_cta(p); });
  return 0;
}

int dec_ctas_per_sm(int, size_t, bool) { return 1; }

const char* build_info() { return "cuda_emu (CPU emulation of the kernels)"; }

}  // namespace zc_backend
