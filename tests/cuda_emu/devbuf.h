// devbuf.h: "device memory" for the emulator's tests (host memory in the
// emulator): n bytes at an offset `mis` past a 256-byte aligned address, so
// that misaligned accesses are exercised, then a guard byte that no call
// may write (with -fsanitize=address an access past it is reported too).
#ifndef ZIPCCL_TESTS_CUDA_EMU_DEVBUF_H
#define ZIPCCL_TESTS_CUDA_EMU_DEVBUF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

struct DevBuf {
  uint8_t* base = nullptr;
  uint8_t* p = nullptr;
  size_t n = 0;
  DevBuf(size_t bytes, size_t mis, uint8_t fill) : n(bytes) {
    void* q = nullptr;
    if (posix_memalign(&q, 256, bytes + mis + 1) != 0) {
      fprintf(stderr, "out of memory\n");
      exit(2);
    }
    base = (uint8_t*)q;
    memset(base, fill, bytes + mis + 1);
    p = base + mis;
  }
  ~DevBuf() { free(base); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void put(const std::vector<uint8_t>& b) {
    if (!b.empty()) memcpy(p, b.data(), b.size());
  }
  // the guard byte still holds the buffer's fill
  bool guard_ok(uint8_t fill) const { return p[n] == fill; }
};

#endif
