// zc_kernels.h: the zip3 kernels as __host__ __device__ CTA bodies.
//
// Every function here is executed by all threads of a thread block (CTA) of
// kThreads = 256 threads (8 warps). The __global__ wrappers in zc_cuda.cu
// call them on the GPU; tests/cuda_emu/ calls the same functions on the CPU
// over an emulated grid. Only zc_port.h knows the difference.
//
// Work decomposition (cuda/README.md has the full picture):
//  * a "unit" is one zip3 block of 16384 elements; CTAs are persistent and
//    take units from a ticket counter in increasing order, so that a unit's
//    predecessors are always running or done (decoupled look-back);
//  * a unit is processed in tiles of kTile = 2048 elements: global memory
//    is moved through shared memory with 16-byte vector accesses; warp w
//    owns elements [256w, 256w+256) of a tile and lane i handles elements
//    32s+i (s = 0..7) of that range, so one __ballot_sync over the warp
//    yields one 32-bit word of a bit plane (FORMAT.md 2.2);
//  * escape positions: per 32-element group the escape mask is a ballot,
//    the lane's rank a popcount under it, the warps' counts are scanned with
//    __shfl_up_sync, and the unit's offset in the dynamic part comes from a
//    decoupled look-back over the per-unit counts;
//  * the CRC-32C of every block is computed from shared memory: thread t
//    hashes bytes [t*CB, (t+1)*CB) of each tile (slicing-by-4), folds its
//    tiles together with a "shift by one tile" linear map (table lookups),
//    and the 256 partial CRCs are combined with one GF(2) multiplication
//    each and an xor-reduction.
#pragma once

#include "zc_format.h"

namespace zc {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 2048;  // elements per tile
constexpr int kFastElems = (int)(kZip3Block / kThreads);  // elements per thread on the direct paths
constexpr int kMaxChunks = 48;
constexpr int kMaxSources = 48;

// Device-side status (the first bytes of every workspace).
struct DevStatus {
  uint32_t code;  // 0 or an E_* code: the first error reported wins
  int32_t chunk;  // chunk (decode) or source (reduce) index
  int64_t block;  // unit (16384-element block) index within it
  int32_t detail;
  uint32_t reserved;
};

ZC_HD ZC_INLINE void report_error(DevStatus* st, int code, int chunk, int64_t block, int detail) {
  if (atomic_cas_u32(&st->code, 0, (uint32_t)code) == 0) {
    st->chunk = chunk;
    st->block = block;
    st->detail = detail;
  }
}

// Detail codes (what check failed), for messages.
enum : int {
  D_HEADER = 1,
  D_INDEX_RESERVED = 2,
  D_COUNT = 3,
  D_WINDOW = 4,
  D_DYN_RANGE = 5,
  D_PADDING = 6,
  D_ESC_OVERRUN = 7,
  D_ESC_VALUE = 8,
  D_ESC_COUNT = 9,
  D_CRC = 10,
  D_DYN_LEN = 11,
  D_INDEX_PAD = 12,
};

// ---------------------------------------------------------------- global memory access

// Alignment (1, 2, 4, 8 or 16) of an address.
ZC_HD ZC_INLINE int align_of(const void* p) {
  uintptr_t a = (uintptr_t)p;
  if ((a & 15) == 0) return 16;
  if ((a & 7) == 0) return 8;
  if ((a & 3) == 0) return 4;
  if ((a & 1) == 0) return 2;
  return 1;
}

// Copies 16 bytes between global and shared memory with the widest
// accesses the global side's alignment a allows (the shared side is
// 16-byte aligned).
ZC_HD ZC_INLINE void copy16(uint8_t* dst, const uint8_t* src, int a) {
  if (a == 16) {
    st16(dst, ld16(src));
  } else if (a == 8) {
    const uint64_t* s = (const uint64_t*)src;
    uint64_t* d = (uint64_t*)dst;
    d[0] = s[0];
    d[1] = s[1];
  } else if (a == 4) {
    const uint32_t* s = (const uint32_t*)src;
    uint32_t* d = (uint32_t*)dst;
    for (int k = 0; k < 4; k++) d[k] = s[k];
  } else if (a == 2) {
    const uint16_t* s = (const uint16_t*)src;
    uint16_t* d = (uint16_t*)dst;
    for (int k = 0; k < 8; k++) d[k] = s[k];
  } else {
    for (int k = 0; k < 16; k++) dst[k] = src[k];
  }
}

// CTA-wide copy of nbytes from global src into shared dst, zero-filling dst
// up to cap (a multiple of 16). Full 16-byte pieces use vector accesses
// when src is 16-byte aligned.
ZC_HD ZC_INLINE void cta_load(uint8_t* dst, const uint8_t* src, int64_t nbytes, int cap) {
  int a = align_of(src);
  for (int i = (int)tid() * 16; i < cap; i += kThreads * 16) {
    if (i + 16 <= nbytes) {
      copy16(dst + i, src + i, a);
    } else {
      for (int k = 0; k < 16; k++) dst[i + k] = (i + k < nbytes) ? src[i + k] : 0;
    }
  }
}

// CTA-wide copy of nbytes from shared src to global dst.
ZC_HD ZC_INLINE void cta_store(uint8_t* dst, const uint8_t* src, int64_t nbytes) {
  int a = align_of(dst);
  for (int64_t i = (int64_t)tid() * 16; i < nbytes; i += kThreads * 16) {
    if (i + 16 <= nbytes) {
      copy16(dst + i, src + i, a);
    } else {
      for (int64_t k = i; k < nbytes; k++) dst[k] = src[k];
    }
  }
}

// Word i (0..3) of a 16-byte vector; i is a constant after unrolling.
ZC_HD ZC_INLINE uint32_t u4_word(const U4& v, int i) { return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w)); }

// Element access in shared memory (naturally aligned).
ZC_HD ZC_INLINE uint32_t lds_elem(const uint8_t* p, int size) {
  if (size == 1) return p[0];
  if (size == 2) return *(const uint16_t*)p;
  return *(const uint32_t*)p;
}

ZC_HD ZC_INLINE void sts_elem(uint8_t* p, int size, uint32_t x) {
  if (size == 1) {
    p[0] = (uint8_t)x;
  } else if (size == 2) {
    *(uint16_t*)p = (uint16_t)x;
  } else {
    *(uint32_t*)p = x;
  }
}

ZC_HD ZC_INLINE void st32g(uint8_t* p, uint32_t v) {
  if (((uintptr_t)p & 3) == 0) {
    *(uint32_t*)p = v;
  } else {
    put_u32(p, v);
  }
}

ZC_HD ZC_INLINE uint32_t ld32g(const uint8_t* p) {
  if (((uintptr_t)p & 3) == 0) return *(const uint32_t*)p;
  return get_u32(p);
}

// Stores 16 bytes from shared src to global dst, clipped to the first
// `limit` bytes.
ZC_HD ZC_INLINE void s2g16_clip(uint8_t* dst, const uint8_t* src, int64_t limit) {
  if (limit >= 16) {
    copy16(dst, src, align_of(dst));
  } else {
    for (int64_t k = 0; k < limit; k++) dst[k] = src[k];
  }
}

// ---------------------------------------------------------------- CTA-level helpers

// CRC constants, computed once per context on the host (crc_consts_fill)
// and kept in device memory: the kernels copy the tables they need into
// shared memory when a CTA starts. Index cls = size class of the element
// (1, 2, 4 bytes -> 0, 1, 2), which fixes the tile (2048 elements) and the
// per-thread chunk CB = tile / 256 bytes.
struct CrcConsts {
  uint32_t t[1024];      // slicing-by-4 tables
  uint32_t s[3][1024];   // linear map "append one tile of zero bytes"
  uint32_t kt[3][256];   // x^(8*(255-t)*CB): the bytes after thread t's chunk in a full tile
  uint32_t kb[3][256];   // x^(8*(255-t)*64*size): after thread t's 64 elements in a full zip3 block
  uint32_t fin_zip3[3];  // conditioning term of a full zip3 block (16384 elements)
  uint32_t fin_raw[3];   // of a full raw block (65536 elements)
  uint32_t pad[2];
};

ZC_HD ZC_INLINE constexpr int size_class(int size) { return size == 1 ? 0 : (size == 2 ? 1 : 2); }

inline void crc_consts_fill(CrcConsts* c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < 256; i++) {
    uint32_t v = crc_byte_slow((uint32_t)i);
    c->t[i] = v;
    for (int k = 1; k < 4; k++) {
      v = (v >> 8) ^ crc_byte_slow(v & 0xFFu);
      c->t[k * 256 + i] = v;
    }
  }
  for (int cls = 0; cls < 3; cls++) {
    const int size = 1 << cls;
    const int TB = kTile * size, CB = TB / kThreads;
    const uint32_t K = crc_x8n((uint64_t)TB);
    for (int i = 0; i < 1024; i++) c->s[cls][i] = crc_multmodp(K, (uint32_t)(i & 255) << (8 * (i >> 8)));
    for (int t = 0; t < kThreads; t++) {
      c->kt[cls][t] = crc_x8n((uint64_t)(kThreads - 1 - t) * CB);
      c->kb[cls][t] = crc_x8n((uint64_t)(kThreads - 1 - t) * kFastElems * size);
    }
    c->fin_zip3[cls] = crc_multmodp(crc_x8n((uint64_t)kZip3Block * size), 0xFFFFFFFFu);
    c->fin_raw[cls] = crc_multmodp(crc_x8n((uint64_t)kRawBlock * size), 0xFFFFFFFFu);
  }
}

// Copies the byte tables and the tile map of size class cls into shared
// memory (16-byte vector loads).
ZC_HD ZC_INLINE void crc_init_tables(uint32_t* t, uint32_t* s, const CrcConsts* g, int cls) {
  for (int i = (int)tid() * 4; i < 1024; i += kThreads * 4) {
    st16(t + i, ld16(g->t + i));
    st16(s + i, ld16(g->s[cls] + i));
  }
  sync();
}

// Raw CRC (register from 0) of one whole chunk of CB bytes at p (shared
// memory, 16-byte aligned): 16-byte vector loads when CB allows.
ZC_HD ZC_INLINE uint32_t crc_chunk_full(const uint32_t* t, const uint8_t* p, int CB) {
  uint32_t c = 0;
  if (CB % 16 == 0) {
    for (int k = 0; k < CB; k += 16) {
      const U4 v = ld16(p + k);
      c = crc_update_word(t, c, v.x);
      c = crc_update_word(t, c, v.y);
      c = crc_update_word(t, c, v.z);
      c = crc_update_word(t, c, v.w);
    }
    return c;
  }
  for (int k = 0; k < CB; k += 4) c = crc_update_word(t, c, *(const uint32_t*)(p + k));
  return c;
}

// Raw CRC of the first n bytes of a chunk at p (4-byte aligned); 0 when
// n <= 0.
ZC_HD ZC_INLINE uint32_t crc_chunk_part(const uint32_t* t, const uint8_t* p, int n) {
  uint32_t c = 0;
  int k = 0;
  for (; k + 4 <= n; k += 4) c = crc_update_word(t, c, *(const uint32_t*)(p + k));
  for (; k < n; k++) c = t[(c ^ p[k]) & 0xFFu] ^ (c >> 8);
  return c;
}

// Per-thread CRC state across the tiles of one block.
struct CrcAcc {
  uint32_t full;  // Horner accumulator over full tiles
  uint32_t last;  // raw CRC of this thread's part of a partial last tile
  int last_len;   // bytes in that partial tile (0 = none)
};

// Adds this thread's chunk of a tile of tb valid bytes (tile capacity TB,
// chunk CB = TB/256 bytes) held in shared memory at stage.
ZC_HD ZC_INLINE void crc_tile(CrcAcc& a, const uint32_t* t, const uint32_t* s, const uint8_t* stage, int tb, int TB) {
  const int CB = TB / kThreads;
  const int c0 = (int)tid() * CB;
  // Branches on the unclamped remainder. The clamped form (len = min(max(
  // tb - c0, 0), CB), then len == CB) was miscompiled by ptxas 13.0 and
  // 13.2 at -O3 for sm_90: fused into one VIMNMX.RELU whose predicate sent
  // partial chunks down the whole-chunk path (found by tests/test_gpu.py on
  // an H100; the CPU emulation cannot show it).
  const int rem = tb - c0;
  const uint32_t c = rem >= CB ? crc_chunk_full(t, stage + c0, CB) : crc_chunk_part(t, stage + c0, rem);
  if (tb == TB) {
    a.full = crc_apply_map(s, a.full) ^ c;
  } else {
    a.last = c;
    a.last_len = tb;
  }
}

// Combines the 256 per-thread states into the CRC-32C of a block of nbytes.
// kt = x^(8*(255-tid)*CB), fin_full = the conditioning term of a full
// block (used when nbytes == full_bytes). red: 8 words of shared memory.
// Returns the CRC in thread 0 (other threads: undefined).
ZC_HD ZC_INLINE uint32_t crc_block(const CrcAcc& a, uint32_t kt, int TB, int64_t nbytes, int64_t full_bytes,
                                  uint32_t fin_full, uint32_t* red) {
  int CB = TB / kThreads;
  uint32_t v;
  if (a.last_len == 0) {
    v = crc_multmodp(kt, a.full);
  } else {
    int L = a.last_len;
    int end = ((int)tid() + 1) * CB;
    v = crc_multmodp(crc_x8n((uint64_t)(TB + L - end)), a.full);
    int after = L - (end < L ? end : L);
    v ^= crc_multmodp(crc_x8n((uint64_t)after), a.last);
  }
  for (int o = 16; o > 0; o >>= 1) v ^= shfl_xor(v, (unsigned)o);
  if (lane() == 0) red[warp()] = v;
  sync();
  uint32_t r = 0;
  if (tid() == 0) {
    for (int w = 0; w < kWarps; w++) r ^= red[w];
    uint32_t fin = nbytes == full_bytes ? fin_full : crc_multmodp(crc_x8n((uint64_t)nbytes), 0xFFFFFFFFu);
    r = ~(r ^ fin);
  }
  sync();
  return r;
}

// Decoupled look-back (one warp): publishes this unit's count and returns
// the sum of the counts of units 0..u-1 of the same sequence. states[]
// holds, per unit, 0 (not ready), kAgg|count or kPre|inclusive prefix.
constexpr uint64_t kAgg = (uint64_t)1 << 62;
constexpr uint64_t kPre = (uint64_t)2 << 62;
constexpr uint64_t kValMask = kAgg - 1;

ZC_HD ZC_INLINE void lookback_publish(uint64_t* states, int64_t u, uint64_t count) {
  store_relaxed_u64(&states[u], (u == 0 ? kPre : kAgg) | (count & kValMask));
}

ZC_HD ZC_INLINE uint64_t lookback_prefix(uint64_t* states, int64_t u, uint64_t count) {
  if (u == 0) return 0;
  uint64_t prefix = 0;
  int64_t j = u - 1;
  for (;;) {
    int64_t idx = j - (int64_t)lane();
    uint64_t v = idx >= 0 ? load_volatile_u64(&states[idx]) : kPre;
    uint32_t flag = (uint32_t)(v >> 62);
    uint32_t pm = ballot(flag == 2);
    uint32_t lim = pm ? lowest_bit(pm) : 31u;
    uint32_t need = (2u << lim) - 1u;  // lanes 0..lim (all lanes when lim = 31)
    if (ballot(flag == 0) & need) {
      spin_pause();
      continue;
    }
    uint64_t mine = lane() <= lim ? (v & kValMask) : 0;
    for (int o = 16; o > 0; o >>= 1) mine += shfl_xor64(mine, (unsigned)o);
    prefix += mine;
    if (pm) break;
    j -= 32;
  }
  if (lane() == 0) store_relaxed_u64(&states[u], kPre | ((prefix + count) & kValMask));
  return prefix;
}

// Exclusive scan of the 8 warps' counts (every warp computes it with
// __shfl_up_sync from the shared array); returns this warp's offset and
// the total in *total.
ZC_HD ZC_INLINE uint32_t warp_offsets(const uint32_t* warp_cnt, uint32_t* total) {
  uint32_t v = lane() < (unsigned)kWarps ? warp_cnt[lane()] : 0;
  uint32_t incl = v;
  for (unsigned d = 1; d < (unsigned)kWarps; d <<= 1) {
    uint32_t o = shfl_up(incl, d);
    if (lane() >= d) incl += o;
  }
  *total = shfl(incl, kWarps - 1);
  return shfl(incl - v, (int)warp());
}

// Exclusive scan of one value per thread over the CTA (thread order);
// the total goes to *total. warp_cnt: kWarps words of shared memory.
ZC_HD ZC_INLINE uint32_t cta_exclusive_scan(uint32_t v, uint32_t* warp_cnt, uint32_t* total) {
  uint32_t incl = v;
  for (unsigned d = 1; d < 32; d <<= 1) {
    const uint32_t o = shfl_up(incl, d);
    if (lane() >= d) incl += o;
  }
  if (lane() == 31) warp_cnt[warp()] = incl;
  sync();
  const uint32_t r = warp_offsets(warp_cnt, total) + incl - v;
  sync();
  return r;
}

// True in every thread if all bytes of [p, p+n) are zero (CTA-wide).
ZC_HD ZC_INLINE bool cta_all_zero(const uint8_t* p, int64_t n, uint32_t* red) {
  uint32_t acc = 0;
  for (int64_t i = tid(); i < n; i += kThreads) acc |= p[i];
  uint32_t any = ballot(acc != 0);
  if (lane() == 0) red[warp()] = any;
  sync();
  uint32_t r = 0;
  for (int w = 0; w < kWarps; w++) r |= red[w];
  sync();
  return r == 0;
}

// Chunk / sequence lookup: index c with unit0[c] <= job < unit0[c+1].
ZC_HD ZC_INLINE int find_chunk(const int64_t* unit0, int n, int64_t job) {
  int c = 0;
  while (c + 1 < n && unit0[c + 1] <= job) c++;
  return c;
}

// ---------------------------------------------------------------- encode

struct EncChunk {
  const uint8_t* src;  // first element of the chunk
  int64_t numel;
  uint8_t* hdr;  // frame header, or nullptr in split mode
  uint8_t* st;   // static part
  uint8_t* dyn;  // dynamic part (capacity align_up(numel, 128))
};

struct EncParams {
  int32_t dtype;
  int32_t nchunks;
  int32_t split;  // 1: static/dynamic parts only (no header, no raw fallback)
  int32_t pad;
  int64_t unit0[kMaxChunks + 1];   // zip3 blocks before chunk c
  int64_t runit0[kMaxChunks + 1];  // raw blocks before chunk c (fallback kernel)
  EncChunk ch[kMaxChunks];
  int64_t* out_lens;  // per chunk: frame length, or dynamic length in split mode
  const CrcConsts* crc;
  uint32_t* ticket;
  uint64_t* states;  // one per zip3 block
  uint32_t* flags;   // per chunk: 1 = fall back to a raw frame
};

struct EncSmem {
  uint32_t crc_t[1024];
  uint32_t crc_s[1024];
  uint8_t stage[kTile * 4];
  uint8_t r8s[kTile];
  uint8_t r16s[kTile * 2];
  uint8_t esc[kZip3Block];
  uint8_t ctab[256];  // direct path: code_of(window, field)
  uint32_t warp_cnt[kWarps];
  uint32_t red[kWarps];
  uint32_t esc_total;
  uint32_t win_mode, win_base;
  uint32_t pad;
  int64_t job;
  uint64_t prefix;
};

// The encoder's direct path, for a full block whose input and static record
// are 16-byte aligned: thread t codes elements [64t, 64t+64) from registers
// (16-byte loads, issued before the window is known), stores its plane
// words and R8/R16 bytes with 16-byte stores, and hashes its own bytes for
// the CRC (combined with CrcConsts::kb). Its escaped fields go to
// sm.esc[64t + j], and from there to the dynamic part once the block's
// offset is known.

template <int DT>
struct FastEncIn {
  U4 d[4 * fmt_of(DT).size];  // this thread's 64 elements
};

template <int DT>
ZC_HD ZC_INLINE void fast_enc_load(FastEncIn<DT>& in, const uint8_t* src) {
ZC_UNROLL
  for (int i = 0; i < 4 * fmt_of(DT).size; i++) in.d[i] = ld16(src + 16 * i);
}

// Raw CRC of this thread's bytes (combined with CrcConsts::kb).
template <int DT>
ZC_HD ZC_INLINE uint32_t fast_enc_crc(const FastEncIn<DT>& in, const uint32_t* t) {
  uint32_t crc = 0;
ZC_UNROLL
  for (int i = 0; i < 4 * fmt_of(DT).size; i++) {
    crc = crc_update_word(t, crc, in.d[i].x);
    crc = crc_update_word(t, crc, in.d[i].y);
    crc = crc_update_word(t, crc, in.d[i].z);
    crc = crc_update_word(t, crc, in.d[i].w);
  }
  return crc;
}

// Codes this thread's elements into rec; returns its escape count. Needs
// sm.ctab.
template <int DT>
ZC_HD uint32_t fast_encode_unit(const FastEncIn<DT>& in, uint8_t* rec, EncSmem& sm) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  const Zip3Layout L = zip3_layout(F, kZip3Block);
  uint8_t* esc = sm.esc + kFastElems * tid();
  uint32_t m = 0;
ZC_UNROLL
  for (int k = 0; k < 2; k++) {
    uint32_t pw[3] = {0, 0, 0}, qw[4] = {0, 0, 0, 0};
    uint32_t r8w[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // the group's 32 R8 bytes
ZC_UNROLL
    for (int i = 0; i < 32; i++) {
      const int x = 32 * k + i;
      const uint32_t word = u4_word(in.d[(x * SZ) / 16], ((x * SZ) / 4) % 4);
      const uint32_t v = SZ == 4 ? word : (word >> (8 * ((x * SZ) % 4))) & ((1u << (8 * SZ)) - 1u);
      const uint32_t field = elem_field(F, v);
      const uint32_t code = sm.ctab[field];
      pw[0] |= (code & 1u) << i;
      pw[1] |= ((code >> 1) & 1u) << i;
      pw[2] |= ((code >> 2) & 1u) << i;
      if (code == 0) esc[m++] = (uint8_t)field;
ZC_UNROLL
      for (int j = 0; j < F.nq; j++) qw[j] |= ((v >> F.q[j]) & 1u) << i;
      if (F.r8) r8w[i / 4] |= elem_r8(F, v) << (8 * (i % 4));
      if (F.r16 && i % 8 == 7) {  // 8 elements: 16 bytes of R16
        const int x0 = x - 7;
        uint32_t h[4];
ZC_UNROLL
        for (int j = 0; j < 4; j++) {
          const uint32_t lo = u4_word(in.d[((x0 + 2 * j) * 4) / 16], (x0 + 2 * j) % 4);
          const uint32_t hi = u4_word(in.d[((x0 + 2 * j + 1) * 4) / 16], (x0 + 2 * j + 1) % 4);
          h[j] = (lo & 0xFFFFu) | hi << 16;
        }
        const U4 o = {h[0], h[1], h[2], h[3]};
        st16(rec + L.r16 + 2 * ((int64_t)kFastElems * tid() + x0), o);
      }
    }
    const int64_t g = 2 * (int64_t)tid() + k;
ZC_UNROLL
    for (int j = 0; j < 3; j++) *(uint32_t*)(rec + L.planes + j * L.plane_len + 4 * g) = pw[j];
ZC_UNROLL
    for (int j = 0; j < F.nq; j++) *(uint32_t*)(rec + L.res_planes + j * L.plane_len + 4 * g) = qw[j];
    if (F.r8) {
      const U4 a = {r8w[0], r8w[1], r8w[2], r8w[3]}, b = {r8w[4], r8w[5], r8w[6], r8w[7]};
      st16(rec + L.r8 + (int64_t)kFastElems * tid() + 32 * k, a);
      st16(rec + L.r8 + (int64_t)kFastElems * tid() + 32 * k + 16, b);
    }
  }
  return m;
}

// Encodes zip3 blocks (persistent CTAs; grid size is free).
template <int DT>
ZC_HD void encode_cta(const EncParams& P) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  constexpr int TB = kTile * SZ;   // tile bytes
  constexpr int CB = TB / kThreads;  // CRC chunk per thread
  constexpr int CLS = size_class(SZ);
  static_assert(CB == 8 << CLS, "chunk per thread");
  EncSmem& sm = *reinterpret_cast<EncSmem*>(smem());
  crc_init_tables(sm.crc_t, sm.crc_s, P.crc, CLS);
  const uint32_t kt = P.crc->kt[CLS][tid()];
  const uint32_t fin_full = P.crc->fin_zip3[CLS];
  const int64_t total_units = P.unit0[P.nchunks];
  const unsigned w = warp(), ln = lane();
  // this lane's two sample positions in a full block (FORMAT.md 3.4)
  const int64_t full_pos[2] = {sample_pos(ln, kZip3Block), sample_pos(ln + 32, kZip3Block)};

  for (;;) {
    if (tid() == 0) sm.job = (int64_t)atomic_add_u32(P.ticket, 1);
    sync();
    const int64_t job = sm.job;
    if (job >= total_units) break;
    const int c = find_chunk(P.unit0, P.nchunks, job);
    const EncChunk& ch = P.ch[c];
    const int64_t b = job - P.unit0[c];
    const int64_t n = ch.numel - b * kZip3Block < kZip3Block ? ch.numel - b * kZip3Block : kZip3Block;
    const uint8_t* src = ch.src + b * kZip3Block * SZ;
    const Plan plan = plan_of(F, KIND_ZIP3, ch.numel);
    const Zip3Layout L = zip3_layout(F, n);
    uint8_t* rec = ch.st + plan.index_len + b * plan.full_len;
    const bool fast = n == kZip3Block && align_of(src) == 16 && align_of(rec) == 16;
    FastEncIn<DT> fin = {};
    if (fast) fast_enc_load<DT>(fin, src + (int64_t)kFastElems * SZ * tid());

    // window from 64 samples (warp 0; the rest of the CTA waits for it, so
    // it is kept short: both loads issued first, full blocks' positions
    // computed once, one shuffle per step where the sum fits 32 bits)
    if (w == 0) {
      const int64_t S = n < kSamples ? n : kSamples;
      const uint32_t mag = (uint32_t)(((uint64_t)1 << (F.exp_shift + F.exp_bits)) - 1);
      uint32_t m[2] = {mag, mag};  // no sample: the all-ones field, which the rule skips
ZC_UNROLL
      for (int h = 0; h < 2; h++) {
        const int64_t k = ln + 32 * h;
        const int64_t i = n == kZip3Block ? full_pos[h] : (n <= kSamples ? k : sample_pos((uint32_t)k, n));
        if (k < S) m[h] = load_elem(src + i * SZ, SZ) & mag;
      }
      uint64_t sum = 0;
      uint32_t cnts = 0;  // nonzero-and-finite samples, plus zero fields << 16
ZC_UNROLL
      for (int h = 0; h < 2; h++) {
        const uint32_t field = m[h] >> F.exp_shift;
        if (field == 0) {
          cnts += 1u << 16;
        } else if (field < max_field(F)) {
          sum += m[h];
          cnts++;
        }
      }
      constexpr bool narrow = F.exp_shift + F.exp_bits + 6 <= 32;  // 64 samples' sum fits 32 bits
      for (int o = 16; o > 0; o >>= 1) {
        sum += narrow ? shfl_xor((uint32_t)sum, (unsigned)o) : shfl_xor64(sum, (unsigned)o);
        cnts += shfl_xor(cnts, (unsigned)o);
      }
      if (ln == 0) {
        Window win = window_from_sums(F, sum, cnts & 0xFFFFu, cnts >> 16, (uint32_t)S);
        sm.win_mode = win.mode;
        sm.win_base = win.base;
        sm.esc_total = 0;
      }
    }
    sync();
    const Window win = {sm.win_mode, sm.win_base};
    CrcAcc crc = {0, 0, 0};
    uint32_t kcrc = kt, fbase = 0, fnesc = 0;
    if (fast) {
      sm.ctab[tid()] = (uint8_t)code_of(win, tid());
      sync();
      fnesc = fast_encode_unit<DT>(fin, rec, sm);
      uint32_t total;
      fbase = cta_exclusive_scan(fnesc, sm.warp_cnt, &total);
      if (tid() == 0) sm.esc_total = total;
      kcrc = P.crc->kb[CLS][tid()];
    }
    const int ntiles = fast ? 0 : (int)((n + kTile - 1) / kTile);
    for (int t = 0; t < ntiles; t++) {
      const int tn = (int)(n - (int64_t)t * kTile < kTile ? n - (int64_t)t * kTile : kTile);
      cta_load(sm.stage, src + (int64_t)t * TB, (int64_t)tn * SZ, TB);
      sync();
      crc_tile(crc, sm.crc_t, sm.crc_s, sm.stage, tn * SZ, TB);

      // code 8 groups of 32 elements per warp
      const int eb = (int)w * 256;
      uint32_t pw[3] = {0, 0, 0};
      uint32_t qw[4] = {0, 0, 0, 0};
      uint32_t em[8];
      uint32_t ef[8];
      uint32_t cnt = 0;
ZC_UNROLL
      for (int s = 0; s < 8; s++) {
        const int e = eb + 32 * s + (int)ln;
        const int rem = tn - (eb + 32 * s);
        const uint32_t vm = rem >= 32 ? 0xFFFFFFFFu : (rem <= 0 ? 0u : (1u << rem) - 1u);
        const bool valid = e < tn;
        const uint32_t x = valid ? lds_elem(sm.stage + e * SZ, SZ) : 0u;
        const uint32_t field = elem_field(F, x);
        const uint32_t code = valid ? code_of(win, field) : 0u;
        const uint32_t b0 = ballot(code & 1u), b1 = ballot(code & 2u), b2 = ballot(code & 4u);
        em[s] = vm & ~(b0 | b1 | b2);
        ef[s] = field;
        cnt += popc(em[s]);
        if (ln == (unsigned)s) {
          pw[0] = b0;
          pw[1] = b1;
          pw[2] = b2;
        }
ZC_UNROLL
        for (int j = 0; j < F.nq; j++) {
          const uint32_t bq = ballot(valid && ((x >> F.q[j]) & 1u));
          if (ln == (unsigned)s) qw[j] = bq;
        }
        if (F.r8) sm.r8s[e] = valid ? (uint8_t)elem_r8(F, x) : 0;
        if (F.r16) {
          sm.r16s[2 * e] = valid ? (uint8_t)x : 0;
          sm.r16s[2 * e + 1] = valid ? (uint8_t)(x >> 8) : 0;
        }
      }
      if (ln == 0) sm.warp_cnt[w] = cnt;
      sync();
      uint32_t tile_total;
      const uint32_t base = sm.esc_total + warp_offsets(sm.warp_cnt, &tile_total);
      uint32_t run = 0;
ZC_UNROLL
      for (int s = 0; s < 8; s++) {
        const uint32_t k = base + run + popc(em[s] & lanemask_lt());
        if (((em[s] >> ln) & 1u) && k < kZip3Block) sm.esc[k] = (uint8_t)ef[s];
        run += popc(em[s]);
      }

      // static arrays of this warp's 256 elements
      const int64_t e0 = (int64_t)t * kTile + eb;  // block element index
      if (F.r8 && ln < 16) {
        const int64_t off = e0 + 16 * ln;
        if (off < L.np) copy16(rec + L.r8 + off, sm.r8s + eb + 16 * ln, align_of(rec + L.r8 + off));
      }
      if (F.r16) {
        const int64_t off = e0 + 8 * ln;
        if (off < L.np) copy16(rec + L.r16 + 2 * off, sm.r16s + 2 * eb + 16 * ln, align_of(rec + L.r16 + 2 * off));
      }
      if (ln < 8) {
        const int64_t g = e0 / 32 + ln;
        if (g < L.np / 32) {
          for (int j = 0; j < 3; j++) st32g(rec + L.planes + j * L.plane_len + 4 * g, pw[j]);
          for (int j = 0; j < F.nq; j++) st32g(rec + L.res_planes + j * L.plane_len + 4 * g, qw[j]);
        }
      }
      sync();
      if (tid() == 0) sm.esc_total += tile_total;
    }
    // this block's escape count, published before the direct path's CRC is
    // computed and the CRC combined, so that the successors' look-backs
    // find it sooner
    uint64_t* states = P.states + P.unit0[c];
    if (tid() == 0) lookback_publish(states, b, sm.esc_total);
    if (fast) crc.full = fast_enc_crc<DT>(fin, sm.crc_t);
    const uint32_t bcrc = crc_block(crc, kcrc, TB, n * SZ, (int64_t)kZip3Block * SZ, fin_full, sm.red);
    const uint32_t cnt = sm.esc_total;

    // offset of this block's escapes in the chunk's dynamic part
    if (w == 0) {
      uint64_t pre = lookback_prefix(states, b, cnt);
      if (ln == 0) sm.prefix = pre;
    }
    sync();
    const uint64_t prefix = sm.prefix;
    const int64_t dyn_cap = align_up(ch.numel, kAlign);  // never write past the dynamic part
    if (fast) {  // this thread's escapes, from its own part of sm.esc
      for (uint32_t j = 0; j < fnesc && (int64_t)(prefix + fbase + j) < dyn_cap; j++)
        ch.dyn[prefix + fbase + j] = sm.esc[kFastElems * tid() + j];
    } else {
      for (uint32_t i = tid(); i < cnt && i < kZip3Block && (int64_t)(prefix + i) < dyn_cap; i += kThreads)
        ch.dyn[prefix + i] = sm.esc[i];
    }
    for (int64_t i = L.arrays_end + tid(); i < L.static_len; i += kThreads) rec[i] = 0;
    if (tid() == 0) {
      uint8_t* idx = ch.st + kIndexEntry * b;
      put_u32(idx, bcrc);
      put_u32(idx + 4, cnt);
      idx[8] = (uint8_t)win.mode;
      idx[9] = (uint8_t)win.base;
      for (int k = 10; k < 16; k++) idx[k] = 0;
    }
    if (b == 0) {
      for (int64_t i = kIndexEntry * plan.nblocks + tid(); i < plan.index_len; i += kThreads) ch.st[i] = 0;
    }
    if (b == plan.nblocks - 1) {
      const int64_t total = (int64_t)(prefix + cnt);
      const int64_t dyn_len = align_up(total, kAlign);
      for (int64_t i = total + tid(); i < dyn_len && i < dyn_cap; i += kThreads) ch.dyn[i] = 0;
      if (tid() == 0) {
        if (P.split) {
          P.out_lens[c] = dyn_len;
        } else {
          const int64_t frame_len = kHeaderLen + plan.static_len + dyn_len;
          const int64_t raw_len = raw_frame_len(F, ch.numel);
          if (frame_len > raw_len) {
            P.flags[c] = 1;
            P.out_lens[c] = raw_len;
          } else {
            make_header(ch.hdr, sm.crc_t, KIND_ZIP3, DT, ch.numel, dyn_len);
            P.out_lens[c] = frame_len;
          }
        }
      }
    }
    sync();
  }
}

struct FbSmem {
  uint32_t crc_t[1024];
  uint32_t crc_s[1024];
  uint8_t stage[kTile * 4];
  uint32_t red[kWarps];
};

// Raw-frame fallback (after encode_cta): rewrites every chunk flagged in
// P.flags as a raw frame, and writes the header of empty chunks. Grid-stride
// over raw blocks; no ordering needed.
template <int DT>
ZC_HD void fallback_cta(const EncParams& P) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  constexpr int TB = kTile * SZ;
  constexpr int CB = TB / kThreads;
  constexpr int CLS = size_class(SZ);
  static_assert(CB == 8 << CLS, "chunk per thread");
  // Most launches find no chunk to rewrite and none empty: they leave
  // before loading the CRC tables (same answer in every thread).
  bool work = false;
  for (int c = 0; c < P.nchunks && !work; c++) work = P.ch[c].numel == 0 || (!P.split && P.flags[c] != 0);
  if (!work) return;
  FbSmem& sm = *reinterpret_cast<FbSmem*>(smem());
  crc_init_tables(sm.crc_t, sm.crc_s, P.crc, CLS);
  if (bid() == 0 && tid() == 0) {
    for (int c = 0; c < P.nchunks; c++) {
      if (P.ch[c].numel == 0) {
        if (P.split) {
          P.out_lens[c] = 0;
        } else {
          make_header(P.ch[c].hdr, sm.crc_t, KIND_ZIP3, DT, 0, 0);
          P.out_lens[c] = kHeaderLen;
        }
      }
    }
  }
  const uint32_t kt = P.crc->kt[CLS][tid()];
  const uint32_t fin_full = P.crc->fin_raw[CLS];
  const int64_t total = P.runit0[P.nchunks];
  for (int64_t job = bid(); job < total; job += nbid()) {
    const int c = find_chunk(P.runit0, P.nchunks, job);
    if (P.split || P.flags[c] == 0) continue;  // uniform across the CTA
    const EncChunk& ch = P.ch[c];
    const int64_t b = job - P.runit0[c];
    const Plan plan = plan_of(F, KIND_RAW, ch.numel);
    const int64_t n = ch.numel - b * kRawBlock < kRawBlock ? ch.numel - b * kRawBlock : kRawBlock;
    uint8_t* st = ch.hdr + kHeaderLen;
    uint8_t* rec = st + plan.index_len + b * plan.full_len;
    const uint8_t* src = ch.src + b * kRawBlock * SZ;
    CrcAcc crc = {0, 0, 0};
    const int ntiles = (int)((n + kTile - 1) / kTile);
    for (int t = 0; t < ntiles; t++) {
      const int tb = (int)((n - (int64_t)t * kTile < kTile ? n - (int64_t)t * kTile : kTile) * SZ);
      cta_load(sm.stage, src + (int64_t)t * TB, tb, TB);
      sync();
      crc_tile(crc, sm.crc_t, sm.crc_s, sm.stage, tb, TB);
      cta_store(rec + (int64_t)t * TB, sm.stage, align_up(tb, 16) <= TB ? align_up(tb, 16) : TB);
      sync();
    }
    const uint32_t bcrc = crc_block(crc, kt, TB, n * SZ, kRawBlock * SZ, fin_full, sm.red);
    for (int64_t i = align_up(n * SZ, 16) + tid(); i < plan_of(F, KIND_RAW, n).static_len; i += kThreads) rec[i] = 0;
    if (tid() == 0) {
      uint8_t* idx = st + kIndexEntry * b;
      put_u32(idx, bcrc);
      for (int k = 4; k < 16; k++) idx[k] = 0;
    }
    if (b == 0) {
      for (int64_t i = kIndexEntry * plan.nblocks + tid(); i < plan.index_len; i += kThreads) st[i] = 0;
      if (tid() == 0) make_header(ch.hdr, sm.crc_t, KIND_RAW, DT, ch.numel, 0);
    }
    sync();
  }
}

// ---------------------------------------------------------------- decode and decode+reduce

enum : int { SRC_FRAME = 0, SRC_SPLIT_ZIP3 = 1, SRC_SPLIT_RAW = 2, SRC_PLAIN = 3 };
enum : int { OP_SUM = 0, OP_PRODUCT = 2 };

struct DecSrc {
  const uint8_t* a;  // frame, static part, or plain elements
  const uint8_t* b;  // dynamic part (split zip3)
  int64_t len;       // frame: bytes available; split zip3: dynamic length
  int32_t kind;      // SRC_*
  int32_t pad;
};

// Decode (nsrc == 1): chunk c's source is src[c], decoded into dst[c].
// Reduce (nsrc >= 2, nchunks == 1): sources src[0..nsrc) are reduced in
// rank order into dst[0].
struct DecParams {
  int32_t dtype;
  int32_t nchunks;
  int32_t nsrc;
  int32_t op;
  int32_t chunk_base;  // index of chunk 0 of this launch in the caller's request (for errors)
  int32_t pad;
  int64_t unit0[kMaxChunks + 1];
  int64_t numel[kMaxChunks];
  uint8_t* dst[kMaxChunks];
  DecSrc src[kMaxChunks];
  DevStatus* status;
  const CrcConsts* crc;
  uint32_t* ticket;
  uint64_t* states;  // decode: one per unit; reduce: nsrc * units
};

// Per-source state of the unit being decoded (shared memory).
struct SrcState {
  const uint8_t* st;   // static part
  const uint8_t* dyn;  // dynamic part
  int64_t dyn_len;
  int64_t index_len, full_len;
  uint64_t prefix;   // escapes of the earlier blocks
  uint32_t cnt;      // escapes of this block
  uint32_t esc_run;  // escapes consumed so far in this block
  uint32_t crc;      // expected CRC (zip3) of the block
  int32_t kind;      // KIND_ZIP3, KIND_RAW or -1 for plain
  int32_t bad;       // 1: skip (an error was reported)
  uint32_t win_mode, win_base;
  // field_of(window, c) for c = 0..7, a byte each (code 0, the escape, as
  // code 1: its field comes from the escape list); read with byte_of.
  uint32_t ftab[2];
  uint32_t idx_rsv;  // nonzero unless the index entry's reserved bytes are all 0
  int32_t parsed;    // 1 + the source slot whose frame header kind/st/dyn hold, or 0
};

struct DecSmemHead {
  uint32_t crc_t[1024];
  uint32_t crc_s[1024];
  uint8_t stage[kTile * 4];  // R8/R16 tile, or raw / plain elements
  uint8_t dec[kTile * 4];    // decoded tile of the current source
  uint8_t out[kTile * 4];    // reduced output tile
  uint32_t warp_cnt[kWarps];
  uint32_t red[kWarps];
  int64_t job;
  SrcState s[kMaxSources];
  // followed by uint32_t crc_acc[nsrc][kThreads][2] (CrcAcc.full, .last)
};

ZC_HD ZC_INLINE size_t dec_smem_bytes(int nsrc) {
  return sizeof(DecSmemHead) + (size_t)nsrc * kThreads * 2 * sizeof(uint32_t);
}

ZC_HD ZC_INLINE size_t enc_smem_bytes() { return sizeof(EncSmem); }
ZC_HD ZC_INLINE size_t fb_smem_bytes() { return sizeof(FbSmem); }

// Verifies the raw block rb of a raw source (its CRC over the whole block,
// index entry and record padding). Called by the CTA of the block's first unit.
template <int DT>
ZC_HD int verify_raw_block(const SrcState& ss, int64_t numel, int64_t rb, DecSmemHead& sm, uint32_t* crc_scratch,
                           const CrcConsts* cc) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  constexpr int TB = kTile * SZ;
  constexpr int CLS = size_class(SZ);
  const int64_t n = numel - rb * kRawBlock < kRawBlock ? numel - rb * kRawBlock : kRawBlock;
  const uint8_t* rec = ss.st + ss.index_len + rb * ss.full_len;
  const uint8_t* idx = ss.st + kIndexEntry * rb;
  bool ok = cta_all_zero(idx + 4, 12, sm.red);
  ok = cta_all_zero(rec + n * SZ, align_up(n * SZ, kAlign) - n * SZ, sm.red) && ok;
  CrcAcc crc = {0, 0, 0};
  const int ntiles = (int)((n + kTile - 1) / kTile);
  for (int t = 0; t < ntiles; t++) {
    const int tb = (int)((n - (int64_t)t * kTile < kTile ? n - (int64_t)t * kTile : kTile) * SZ);
    cta_load(sm.stage, rec + (int64_t)t * TB, tb, TB);
    sync();
    crc_tile(crc, sm.crc_t, sm.crc_s, sm.stage, tb, TB);
    sync();
  }
  uint32_t got = crc_block(crc, cc->kt[CLS][tid()], TB, n * SZ, kRawBlock * SZ, cc->fin_raw[CLS], sm.red);
  if (tid() == 0) *crc_scratch = (got == get_u32(idx)) ? 1u : 0u;
  sync();
  const bool crc_ok = *crc_scratch != 0;
  sync();
  if (!ok) return E_CORRUPT;
  return crc_ok ? E_OK : E_CHECKSUM;
}

// ---------------------------------------------------------------- decode: the direct path
//
// A full block of one zip3 source, its static record and its output
// 16-byte aligned: every block of a large tensor but the last, in a plain
// decode. Thread t decodes elements [64t, 64t+64) (groups 2t and 2t+1)
// from global memory into registers and stores them with 16-byte stores:
// no shared staging, no shuffles of plane words, one barrier for the
// escape scan, and the CRC-32C of its own 128 (bf16) bytes from registers,
// combined with one GF(2) multiplication by CrcConsts::kb.

// Static data of one thread's 64 elements.
template <int DT>
struct FastIn {
  uint32_t pw[3][2];  // code planes: words of groups 2t, 2t+1
  uint32_t qw[4][2];  // residue planes
  U4 r8[4];           // R8 bytes
  U4 r16[8];          // R16 halves (float32)
};

// Loads the static data of groups 2t+K0 .. 2t+K1-1 of thread t (a
// decode takes both, a reduce one at a time: the other's registers stay
// dead).
template <int DT, int K0 = 0, int K1 = 2>
ZC_HD ZC_INLINE void fast_load(FastIn<DT>& in, const uint8_t* rec) {
  constexpr Fmt F = fmt_of(DT);
  const Zip3Layout L = zip3_layout(F, kZip3Block);
  const int64_t g = 2 * (int64_t)tid();
ZC_UNROLL
  for (int k = K0; k < K1; k++) {
ZC_UNROLL
    for (int j = 0; j < 3; j++) in.pw[j][k] = *(const uint32_t*)(rec + L.planes + j * L.plane_len + 4 * (g + k));
ZC_UNROLL
    for (int j = 0; j < F.nq; j++) in.qw[j][k] = *(const uint32_t*)(rec + L.res_planes + j * L.plane_len + 4 * (g + k));
  }
  if (F.r8) {
ZC_UNROLL
    for (int i = 2 * K0; i < 2 * K1; i++) in.r8[i] = ld16(rec + L.r8 + (int64_t)kFastElems * tid() + 16 * i);
  }
  if (F.r16) {
ZC_UNROLL
    for (int i = 4 * K0; i < 4 * K1; i++) in.r16[i] = ld16(rec + L.r16 + 2 * (int64_t)kFastElems * tid() + 16 * i);
  }
}

// Escaped fields from, at most 8 of them, of a thread whose mine escapes
// start at base in the block's escape list: a byte each in e0:e1, checked
// as they are read (never past the block's count, never a field the
// window codes).
template <int DT>
ZC_HD ZC_INLINE void load_escapes(const uint8_t* esc, uint32_t base, uint32_t from, uint32_t mine, uint32_t cnt,
                                  Window win, uint32_t& e0, uint32_t& e1, bool& overrun, bool& badval) {
  e0 = e1 = 0;
  for (uint32_t j = 0; j < 8 && from + j < mine; j++) {
    uint32_t f = 0;
    if (base + from + j < cnt) {
      f = esc[base + from + j];
      if (!escape_valid(fmt_of(DT), win, f)) badval = true;
    } else {
      overrun = true;
    }
    if (j < 4) {
      e0 |= f << (8 * j);
    } else {
      e1 |= f << (8 * (j - 4));
    }
  }
}

// The element loop of fast_decode_unit. Escaped fields come from a window
// of 8 preloaded in e0:e1, so an escape is a select, not a branch (a
// per-element branch that some lanes take costs the whole warp a
// convergence barrier per element). Every 8 elements the warp checks that
// each lane's window holds that stretch's escapes; a lane past it reloads
// (rare: more than 8 escapes among a thread's 64 elements).
//
// Groups K0..K1-1 of the thread's two; used is the number of its escapes in
// the groups before K0. Each 16 decoded bytes go to sink(x, wd): x is the
// first of their elements among the thread's 64, wd the bytes.
template <int DT, int K0, int K1, class Sink>
ZC_HD ZC_INLINE void fast_decode_elems(const FastIn<DT>& in, const uint32_t* em, uint32_t used, uint32_t mine,
                                       uint32_t base, uint32_t cnt, const uint8_t* esc, Window win, uint32_t ft0,
                                       uint32_t ft1, Sink& sink, bool& overrun, bool& badval) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  constexpr int V = 16 / SZ;  // elements per 16-byte store
  uint32_t e0, e1;
  load_escapes<DT>(esc, base, used, mine, cnt, win, e0, e1, overrun, badval);
  uint32_t wb = used;  // the escape number of e0's first byte
ZC_UNROLL
  for (int k = K0; k < K1; k++) {
ZC_UNROLL
    for (int v = 0; v < 32 / V; v++) {
      uint32_t wd[4] = {0, 0, 0, 0};
ZC_UNROLL
      for (int e = 0; e < V; e++) {
        const int i = v * V + e;     // element in the group
        const int x = 32 * k + i;    // element among the thread's 64
        if (i % 8 == 0) {
          const bool need = used + popc((em[k] >> i) & 0xFFu) > wb + 8;
          if (ballot(need) != 0) {
            if (need) {
              wb = used;
              load_escapes<DT>(esc, base, used, mine, cnt, win, e0, e1, overrun, badval);
            }
          }
        }
        const uint32_t code = ((in.pw[0][k] >> i) & 1u) | ((in.pw[1][k] >> i) & 1u) << 1 | ((in.pw[2][k] >> i) & 1u) << 2;
        const uint32_t eb = (em[k] >> i) & 1u;
        const uint32_t field = eb ? byte_of(e0, e1, used - wb) : byte_of(ft0, ft1, code);
        used += eb;
        uint32_t q = 0;
ZC_UNROLL
        for (int j = 0; j < F.nq; j++) q |= ((in.qw[j][k] >> i) & 1u) << F.q[j];
        const uint32_t r8 = F.r8 ? (u4_word(in.r8[x / 16], (x / 4) % 4) >> (8 * (x % 4))) & 0xFFu : 0u;
        const uint32_t r16 = F.r16 ? (u4_word(in.r16[x / 8], (x / 2) % 4) >> (16 * (x % 2))) & 0xFFFFu : 0u;
        wd[(e * SZ) / 4] |= elem_assemble(F, field & max_field(F), r8, r16, q) << (8 * ((e * SZ) % 4));
      }
      sink(32 * k + v * V, wd);
    }
  }
}

// fast_decode_elems' sink of a plain decode: hash, store.
struct StoreSink {
  const uint32_t* crc_t;
  uint8_t* dst;
  int size;
  uint32_t crc;
  ZC_HD ZC_INLINE void operator()(int x, const uint32_t* wd) {
ZC_UNROLL
    for (int j = 0; j < 4; j++) crc = crc_update_word(crc_t, crc, wd[j]);
    st16(dst + (int64_t)x * size, U4{wd[0], wd[1], wd[2], wd[3]});
  }
};

// Decodes the block whose static record is rec into block_dst, and checks
// it as phases C and D of decode_cta do.
template <int DT>
ZC_HD void fast_decode_unit(const uint8_t* rec, const SrcState& ss, uint8_t* block_dst, const DecParams& P, int who,
                            int64_t u, DecSmemHead& sm) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  const unsigned ln = lane();
  FastIn<DT> in = {};
  fast_load<DT>(in, rec);
  uint8_t* dst = block_dst + (int64_t)kFastElems * SZ * tid();
  uint32_t em[2];
ZC_UNROLL
  for (int k = 0; k < 2; k++) em[k] = ~(in.pw[0][k] | in.pw[1][k] | in.pw[2][k]);
  // this thread's escapes start at base in the block's escape list
  const uint32_t mine = popc(em[0]) + popc(em[1]);
  uint32_t total;
  const uint32_t base = cta_exclusive_scan(mine, sm.warp_cnt, &total);
  const Window win = {ss.win_mode, ss.win_base};
  const uint32_t cnt = ss.cnt;
  const uint8_t* esc = ss.dyn + ss.prefix;  // phase B checked prefix + cnt <= dyn_len
  bool overrun = false, badval = false;
  StoreSink sink = {sm.crc_t, dst, SZ, 0};
  fast_decode_elems<DT, 0, 2>(in, em, 0, mine, base, cnt, esc, win, ss.ftab[0], ss.ftab[1], sink, overrun, badval);
  const uint32_t crc = sink.crc;
  if (ballot(overrun) != 0 && ln == 0) report_error(P.status, E_CORRUPT, who, u, D_ESC_OVERRUN);
  if (ballot(badval) != 0 && ln == 0) report_error(P.status, E_CORRUPT, who, u, D_ESC_VALUE);
  const CrcAcc acc = {crc, 0, 0};
  constexpr int CLS = size_class(SZ);
  const uint32_t got = crc_block(acc, P.crc->kb[CLS][tid()], kTile * SZ, kZip3Block * SZ, kZip3Block * SZ,
                                 P.crc->fin_zip3[CLS], sm.red);
  if (tid() == 0) {
    if (total != cnt) {
      report_error(P.status, E_CORRUPT, who, u, D_ESC_COUNT);
    } else if (got != ss.crc) {
      report_error(P.status, E_CHECKSUM, who, u, D_CRC);
    }
  }
}

// ---------------------------------------------------------------- decode+reduce: the direct path
//
// A full block whose sources are all zip3 records or plain elements, each
// 16-byte aligned, as is the output: every block but the last of a
// reduce-scatter's fold. Thread t owns elements [64t, 64t+64), as in the
// direct decode, and folds them source by source in rank order, one group
// of 32 at a time: 32 fp32 accumulators fit in registers, 64 would spill.
// Each zip3 source's escapes are scanned once, up front; its escape base
// and its running CRC wait in shared memory between the two groups.

// fast_decode_elems' sink of a reduce: hashes (zip3 sources), widens and
// folds into acc; the last source narrows and stores.
template <int DT, int K, bool HASH>
struct FoldSink {
  float (&acc)[32];  // group K's accumulators
  const uint32_t* crc_t;
  uint8_t* dst;  // the thread's 64 elements
  bool first, last, mul;
  uint32_t crc;
  ZC_HD ZC_INLINE void operator()(int x, const uint32_t* wd) {
    constexpr int SZ = fmt_of(DT).size;
    constexpr int V = 16 / SZ;
    constexpr uint32_t M = SZ == 4 ? 0xFFFFFFFFu : (1u << (8 * SZ)) - 1u;
    if (HASH) {
ZC_UNROLL
      for (int j = 0; j < 4; j++) crc = crc_update_word(crc_t, crc, wd[j]);
    }
ZC_UNROLL
    for (int e = 0; e < V; e++) {
      const float y = widen(DT, (wd[(e * SZ) / 4] >> (8 * ((e * SZ) % 4))) & M);
      float& a = acc[x - 32 * K + e];
      a = first ? y : combine(mul, a, y);
    }
    if (last) {
      uint32_t o[4] = {0, 0, 0, 0};
ZC_UNROLL
      for (int e = 0; e < V; e++) o[(e * SZ) / 4] |= narrow(DT, acc[x - 32 * K + e]) << (8 * ((e * SZ) % 4));
      st16(dst + (int64_t)x * SZ, U4{o[0], o[1], o[2], o[3]});
    }
  }
};

// Folds group K (elements 32K..32K+31 of the thread's 64) of every source.
// scan[2 * (r * kThreads + t)]: source r's escape base for thread t (bits
// 0..15), its escapes in group 0 (16..23) and in both groups (24..31);
// the next word its running CRC.
template <int DT, int K>
ZC_HD ZC_INLINE void fast_reduce_group(const DecParams& P, int64_t u, uint8_t* dst, uint32_t* scan,
                                       DecSmemHead& sm) {
  constexpr int SZ = fmt_of(DT).size;
  constexpr int V = 16 / SZ;
  const bool mul = P.op == OP_PRODUCT;
  float acc[32];
  for (int r = 0; r < P.nsrc; r++) {
    const SrcState& ss = sm.s[r];
    const bool first = r == 0, last = r == P.nsrc - 1;
    uint32_t* sc = scan + 2 * ((int64_t)r * kThreads + tid());
    if (ss.kind == KIND_ZIP3) {
      FastIn<DT> in = {};
      fast_load<DT, K, K + 1>(in, ss.st + ss.index_len + u * ss.full_len);
      uint32_t em[2] = {0, 0};
      em[K] = ~(in.pw[0][K] | in.pw[1][K] | in.pw[2][K]);
      const uint32_t s0 = sc[0];
      FoldSink<DT, K, true> sink = {acc, sm.crc_t, dst, first, last, mul, K == 0 ? 0u : sc[1]};
      bool overrun = false, badval = false;
      fast_decode_elems<DT, K, K + 1>(in, em, K == 0 ? 0u : (s0 >> 16) & 0xFFu, s0 >> 24, s0 & 0xFFFFu, ss.cnt,
                                      ss.dyn + ss.prefix, Window{ss.win_mode, ss.win_base}, ss.ftab[0], ss.ftab[1],
                                      sink, overrun, badval);
      sc[1] = sink.crc;
      if (ballot(overrun) != 0 && lane() == 0) report_error(P.status, E_CORRUPT, P.chunk_base + r, u, D_ESC_OVERRUN);
      if (ballot(badval) != 0 && lane() == 0) report_error(P.status, E_CORRUPT, P.chunk_base + r, u, D_ESC_VALUE);
    } else {  // plain elements
      const uint8_t* src = ss.st + (u * kZip3Block + (int64_t)kFastElems * tid()) * SZ;
      FoldSink<DT, K, false> sink = {acc, nullptr, dst, first, last, mul, 0};
      U4 d[32 / V];
ZC_UNROLL
      for (int v = 0; v < 32 / V; v++) d[v] = ld16(src + (int64_t)(32 * K + v * V) * SZ);
ZC_UNROLL
      for (int v = 0; v < 32 / V; v++) {
        const uint32_t wd[4] = {d[v].x, d[v].y, d[v].z, d[v].w};
        sink(32 * K + v * V, wd);
      }
    }
  }
}

// Folds one full block of every source into block_dst (sources and output
// checked by decode_cta to suit the direct path) and checks each zip3
// source's escape count and CRC, as phase D does.
template <int DT>
ZC_HD ZC_INLINE void fast_reduce_unit(const DecParams& P, int64_t u, uint8_t* block_dst, DecSmemHead& sm, uint32_t* scan) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  constexpr int CLS = size_class(SZ);
  const Zip3Layout L = zip3_layout(F, kZip3Block);
  // every source's escape scan with one barrier: warp totals in the tiled
  // path's staging area, which is idle here
  uint32_t* wcnt = reinterpret_cast<uint32_t*>(sm.stage);
  for (int r = 0; r < P.nsrc; r++) {
    const SrcState& ss = sm.s[r];
    if (ss.kind != KIND_ZIP3) continue;
    const uint8_t* pl = ss.st + ss.index_len + u * ss.full_len + L.planes + 8 * (int64_t)tid();
    const uint32_t* p0 = (const uint32_t*)pl;
    const uint32_t* p1 = (const uint32_t*)(pl + L.plane_len);
    const uint32_t* p2 = (const uint32_t*)(pl + 2 * L.plane_len);
    const uint32_t e0 = popc(~(p0[0] | p1[0] | p2[0])), mine = e0 + popc(~(p0[1] | p1[1] | p2[1]));
    uint32_t incl = mine;
    for (unsigned d = 1; d < 32; d <<= 1) {
      const uint32_t o = shfl_up(incl, d);
      if (lane() >= d) incl += o;
    }
    if (lane() == 31) wcnt[r * kWarps + warp()] = incl;
    scan[2 * ((int64_t)r * kThreads + tid())] = (incl - mine) | e0 << 16 | mine << 24;
  }
  sync();
  for (int r = 0; r < P.nsrc; r++) {
    if (sm.s[r].kind != KIND_ZIP3) continue;
    uint32_t total;
    scan[2 * ((int64_t)r * kThreads + tid())] += warp_offsets(wcnt + r * kWarps, &total);
    if (tid() == 0) sm.s[r].esc_run = total;
  }
  uint8_t* dst = block_dst + (int64_t)kFastElems * SZ * tid();
  fast_reduce_group<DT, 0>(P, u, dst, scan, sm);
  fast_reduce_group<DT, 1>(P, u, dst, scan, sm);
  for (int r = 0; r < P.nsrc; r++) {
    const SrcState& ss = sm.s[r];
    if (ss.kind != KIND_ZIP3) continue;
    const CrcAcc acc = {scan[2 * ((int64_t)r * kThreads + tid()) + 1], 0, 0};
    const uint32_t got = crc_block(acc, P.crc->kb[CLS][tid()], kTile * SZ, kZip3Block * SZ, kZip3Block * SZ,
                                   P.crc->fin_zip3[CLS], sm.red);
    if (tid() == 0) {
      if (ss.esc_run != ss.cnt) {
        report_error(P.status, E_CORRUPT, P.chunk_base + r, u, D_ESC_COUNT);
      } else if (got != ss.crc) {
        report_error(P.status, E_CHECKSUM, P.chunk_base + r, u, D_CRC);
      }
    }
  }
}

// One body, two kernels (zc_kernels.cu): RED is P.nsrc > 1, so that a
// plain decode's registers are allocated without the reduce's direct path,
// and the other way round.
template <int DT, bool RED>
ZC_HD void decode_cta(const DecParams& P) {
  constexpr Fmt F = fmt_of(DT);
  constexpr int SZ = F.size;
  constexpr int TB = kTile * SZ;
  constexpr int CB = TB / kThreads;
  constexpr int CLS = size_class(SZ);
  static_assert(CB == 8 << CLS, "chunk per thread");
  DecSmemHead& sm = *reinterpret_cast<DecSmemHead*>(smem());
  uint32_t* crc_acc = reinterpret_cast<uint32_t*>(smem() + sizeof(DecSmemHead));
  crc_init_tables(sm.crc_t, sm.crc_s, P.crc, CLS);
  const uint32_t kt = P.crc->kt[CLS][tid()];
  const uint32_t fin_full = P.crc->fin_zip3[CLS];
  constexpr bool reduce = RED;
  const int nsrc = reduce ? P.nsrc : 1;
  const bool mul = P.op == OP_PRODUCT;
  const int64_t total_units = P.unit0[P.nchunks];
  const unsigned w = warp(), ln = lane();

  for (int r = (int)tid(); r < nsrc; r += kThreads) sm.s[r].parsed = 0;
  // frames of empty chunks have no unit: check their headers here
  if (bid() == 0) {
    for (int r = (int)tid(); r < (reduce ? nsrc : P.nchunks); r += kThreads) {
      const int c = reduce ? 0 : r;
      if (P.numel[c] != 0 || P.src[r].kind != SRC_FRAME) continue;
      Header h;
      int err = parse_header(P.src[r].a, P.src[r].len, sm.crc_t, DT, 0, &h);
      if (err == E_OK && h.dyn != 0) err = E_CORRUPT;
      if (err != E_OK) report_error(P.status, err, P.chunk_base + r, 0, D_HEADER);
    }
  }

  for (;;) {
    if (tid() == 0) sm.job = (int64_t)atomic_add_u32(P.ticket, 1);
    sync();
    const int64_t job = sm.job;
    if (job >= total_units) break;
    const int c = reduce ? 0 : find_chunk(P.unit0, P.nchunks, job);
    const int64_t u = job - P.unit0[c];
    const int64_t numel = P.numel[c];
    const int64_t n = numel - u * kZip3Block < kZip3Block ? numel - u * kZip3Block : kZip3Block;
    const int64_t units = P.unit0[c + 1] - P.unit0[c];

    // the direct path's candidates (decided after phase B, once the header is read)
    const bool fast = !reduce && n == kZip3Block && (P.src[c].kind == SRC_FRAME || P.src[c].kind == SRC_SPLIT_ZIP3);

    // phase A: one thread per source parses its header / index entry and
    // publishes the escape count of this unit
    for (int r = (int)tid(); r < nsrc; r += kThreads) {
      const DecSrc& ds = P.src[reduce ? r : c];
      SrcState& ss = sm.s[r];
      ss.bad = 0;
      ss.esc_run = 0;
      ss.cnt = 0;
      ss.prefix = 0;
      int err = E_OK;
      if (ds.kind == SRC_FRAME) {
        // every unit of a frame reads the same header: a CTA parses it once
        const int key = (reduce ? r : c) + 1;
        if (ss.parsed != key) {
          Header h;
          err = parse_header(ds.a, ds.len, sm.crc_t, DT, numel, &h);
          ss.parsed = err == E_OK ? key : 0;
          if (err == E_OK) {
            ss.kind = h.kind;
            ss.st = ds.a + kHeaderLen;
            ss.dyn = ss.st + h.static_len;
            ss.dyn_len = h.dyn;
          }
        }
      } else if (ds.kind == SRC_SPLIT_ZIP3) {
        ss.kind = KIND_ZIP3;
        ss.st = ds.a;
        ss.dyn = ds.b;
        ss.dyn_len = ds.len;
        if (ds.len < 0 || ds.len % kAlign != 0) err = E_CORRUPT;
      } else if (ds.kind == SRC_SPLIT_RAW) {
        ss.kind = KIND_RAW;
        ss.st = ds.a;
        ss.dyn = nullptr;
        ss.dyn_len = 0;
      } else {
        ss.kind = -1;
        ss.st = ds.a;
        ss.dyn = nullptr;
        ss.dyn_len = 0;
      }
      if (err != E_OK) {
        ss.bad = 1;
        ss.kind = -2;
        if (u == 0) report_error(P.status, err, P.chunk_base + (reduce ? r : c), 0, D_HEADER);
        continue;
      }
      if (ss.kind == KIND_ZIP3 || ss.kind == KIND_RAW) {
        const Plan pl = plan_of(F, ss.kind, numel);
        ss.index_len = pl.index_len;
        ss.full_len = pl.full_len;
      }
      if (ss.kind == KIND_ZIP3) {
        // the entry in one load where it is aligned: this thread's latency
        // is the whole CTA's
        const uint8_t* idx = ss.st + kIndexEntry * u;
        U4 e;
        if (align_of(idx) == 16) {
          e = ld16(idx);
        } else {
          e = {get_u32(idx), get_u32(idx + 4), get_u32(idx + 8), get_u32(idx + 12)};
        }
        uint64_t* states = P.states + (reduce ? (int64_t)r * units : P.unit0[c]);
        lookback_publish(states, u, e.y);
        ss.crc = e.x;
        ss.cnt = e.y;
        ss.win_mode = e.z & 0xFFu;
        ss.win_base = (e.z >> 8) & 0xFFu;
        ss.idx_rsv = (e.z >> 16) | e.w;
        const Window win = {ss.win_mode, ss.win_base};
        ss.ftab[0] = ss.ftab[1] = 0;
        for (uint32_t k = 0; k < 8; k++) ss.ftab[k >> 2] |= (field_of(win, k == 0 ? 1u : k) & 0xFFu) << (8 * (k & 3));
      }
    }
    sync();
    // phase B: look-back per zip3 source (warp 0), then the checks that
    // need the prefix
    if (w == 0) {
      for (int r = 0; r < nsrc; r++) {
        if (sm.s[r].kind != KIND_ZIP3) continue;
        uint64_t* states = P.states + (reduce ? (int64_t)r * units : P.unit0[c]);
        uint64_t pre = lookback_prefix(states, u, sm.s[r].cnt);
        if (ln == 0) sm.s[r].prefix = pre;
      }
    } else if (SZ < 4 && fast && sm.s[0].kind == KIND_ZIP3) {
      // meanwhile the other warps pull into L2 the static record that the
      // direct path reads next (a frame's header was checked to hold it).
      // Not for float32: it spills 16 bytes that way and loses 2 to 3 %.
      const Plan zp = plan_of(F, KIND_ZIP3, numel);
      const uint8_t* rec = sm.s[0].st + zp.index_len + u * zp.full_len;
      for (int64_t off = ((int64_t)tid() - 32) * 128; off < zp.full_len; off += (kThreads - 32) * 128)
        prefetch_l2(rec + off);
    }
    sync();
    for (int r = 0; r < nsrc; r++) {
      SrcState& ss = sm.s[r];
      const int who = P.chunk_base + (reduce ? r : c);
      if (ss.kind == KIND_ZIP3) {
        const Zip3Layout L = zip3_layout(F, n);
        const uint8_t* rec = ss.st + ss.index_len + u * ss.full_len;
        int err = 0, det = 0;
        const Window win = {ss.win_mode, ss.win_base};
        if (ss.idx_rsv != 0) {
          err = E_CORRUPT;
          det = D_INDEX_RESERVED;
        } else if (ss.cnt > (uint32_t)n || (int64_t)(ss.prefix + ss.cnt) > ss.dyn_len) {
          err = E_CORRUPT;
          det = D_COUNT;
        } else if (!window_valid(F, win)) {
          err = E_CORRUPT;
          det = D_WINDOW;
        }
        // padding past the last element (tail blocks only)
        bool pad_ok = true;
        if (n < kZip3Block) {  // full blocks have no padding
          if (F.r8) pad_ok = cta_all_zero(rec + L.r8 + n, L.np - n, sm.red) && pad_ok;
          if (F.r16) pad_ok = cta_all_zero(rec + L.r16 + 2 * n, 2 * (L.np - n), sm.red) && pad_ok;
          const int64_t g = (n + 31) / 32;
          for (int j = 0; j < 3 + F.nq; j++) {
            const uint8_t* pl = rec + L.planes + j * L.plane_len;
            pad_ok = cta_all_zero(pl + 4 * g, L.plane_len - 4 * g, sm.red) && pad_ok;
            if (n % 32 != 0 && (ld32g(pl + 4 * (g - 1)) >> (n % 32)) != 0) pad_ok = false;
          }
          pad_ok = cta_all_zero(rec + L.arrays_end, L.static_len - L.arrays_end, sm.red) && pad_ok;
        }
        if (u == 0) {
          const Plan pl = plan_of(F, KIND_ZIP3, numel);
          pad_ok = cta_all_zero(ss.st + kIndexEntry * pl.nblocks, pl.index_len - kIndexEntry * pl.nblocks, sm.red) &&
                   pad_ok;
        }
        if (err == 0 && !pad_ok) {
          err = E_CORRUPT;
          det = D_PADDING;
        }
        if (err == 0 && u == units - 1) {
          const int64_t total = (int64_t)(ss.prefix + ss.cnt);
          if (align_up(total, kAlign) != ss.dyn_len || !cta_all_zero(ss.dyn + total, ss.dyn_len - total, sm.red)) {
            err = E_CORRUPT;
            det = D_DYN_LEN;
          }
        }
        if (err != 0) {
          if (tid() == 0) {
            report_error(P.status, err, who, u, det);
            ss.bad = 1;
          }
        }
      } else if (ss.kind == KIND_RAW) {
        if (u == 0) {
          const Plan pl = plan_of(F, KIND_RAW, numel);
          if (!cta_all_zero(ss.st + kIndexEntry * pl.nblocks, pl.index_len - kIndexEntry * pl.nblocks, sm.red)) {
            if (tid() == 0) {
              report_error(P.status, E_CORRUPT, who, u, D_INDEX_PAD);
              ss.bad = 1;
            }
          }
        }
        if ((u * kZip3Block) % kRawBlock == 0) {
          const int err = verify_raw_block<DT>(ss, numel, u * kZip3Block / kRawBlock, sm, &sm.warp_cnt[0], P.crc);
          if (err != E_OK && tid() == 0) report_error(P.status, err, who, u, err == E_CHECKSUM ? D_CRC : D_PADDING);
        }
      }
      sync();
    }
    if (RED && n == kZip3Block && align_of(P.dst[0]) == 16) {  // uniform: read after a barrier
      bool direct = true;
      for (int r = 0; r < nsrc && direct; r++) {
        const SrcState& ss = sm.s[r];
        if (ss.bad) {
          direct = false;
        } else if (ss.kind == KIND_ZIP3) {
          direct = align_of(ss.st + ss.index_len + u * ss.full_len) == 16;
        } else {
          direct = ss.kind == -1 && align_of(ss.st) == 16;
        }
      }
      if (direct) {
        fast_reduce_unit<DT>(P, u, P.dst[0] + u * kZip3Block * SZ, sm, crc_acc);
        sync();  // the unit's shared state is reused by the next one
        continue;
      }
    }
    if (fast && sm.s[0].kind == KIND_ZIP3 && !sm.s[0].bad) {  // uniform: read after a barrier
      // phase A's parse_header checked that the frame holds its static part
      const Plan zp = plan_of(F, KIND_ZIP3, numel);
      const uint8_t* rec = sm.s[0].st + zp.index_len + u * zp.full_len;
      if (align_of(rec) == 16 && align_of(P.dst[c]) == 16) {
        fast_decode_unit<DT>(rec, sm.s[0], P.dst[c] + u * kZip3Block * SZ, P, P.chunk_base + c, u, sm);
        sync();  // the unit's shared state is reused by the next one
        continue;
      }
    }
    for (int i = (int)tid(); i < nsrc * kThreads * 2; i += kThreads) crc_acc[i] = 0;
    sync();

    // phase C: tiles
    const int ntiles = (int)((n + kTile - 1) / kTile);
    for (int t = 0; t < ntiles; t++) {
      const int tn = (int)(n - (int64_t)t * kTile < kTile ? n - (int64_t)t * kTile : kTile);
      const int64_t te = u * kZip3Block + (int64_t)t * kTile;  // first element of the tile in the chunk
      const int eb = (int)w * 256;
      uint32_t x[8];
      float acc[8];
      uint32_t outv[8];
      for (int r = 0; r < nsrc; r++) {
        SrcState& ss = sm.s[r];
        const bool last = r == nsrc - 1;
        if (ss.kind == KIND_ZIP3 && !ss.bad) {
          const Zip3Layout L = zip3_layout(F, n);
          const uint8_t* rec = ss.st + ss.index_len + u * ss.full_len;
          const int64_t bt = (int64_t)t * kTile;  // block element index of the tile
          // stage R8 / R16, load this warp's plane words (lanes 0..7)
          if (F.r8) {
            const int64_t lim = L.np - bt < kTile ? L.np - bt : kTile;
            cta_load(sm.stage, rec + L.r8 + bt, lim, kTile);
          }
          if (F.r16) {
            const int64_t lim = L.np - bt < kTile ? L.np - bt : kTile;
            cta_load(sm.stage + kTile, rec + L.r16 + 2 * bt, 2 * lim, 2 * kTile);
          }
          uint32_t pw[3] = {0, 0, 0}, qw[4] = {0, 0, 0, 0};
          const int64_t g = (bt + eb) / 32 + ln;
          if (ln < 8 && g < L.np / 32) {
            for (int j = 0; j < 3; j++) pw[j] = ld32g(rec + L.planes + j * L.plane_len + 4 * g);
            for (int j = 0; j < F.nq; j++) qw[j] = ld32g(rec + L.res_planes + j * L.plane_len + 4 * g);
          }
          // Each group's plane words are fetched once: the escape mask and
          // this lane's 3-bit code.
          uint32_t em[8], codes[8];
          uint32_t cnt = 0;
ZC_UNROLL
          for (int s = 0; s < 8; s++) {
            const int rem = tn - (eb + 32 * s);
            const uint32_t vm = rem >= 32 ? 0xFFFFFFFFu : (rem <= 0 ? 0u : (1u << rem) - 1u);
            const uint32_t p0 = shfl(pw[0], s), p1 = shfl(pw[1], s), p2 = shfl(pw[2], s);
            em[s] = vm & ~(p0 | p1 | p2);
            codes[s] = ((p0 >> ln) & 1u) | ((p1 >> ln) & 1u) << 1 | ((p2 >> ln) & 1u) << 2;
            cnt += popc(em[s]);
          }
          if (ln == 0) sm.warp_cnt[w] = cnt;
          sync();
          uint32_t tile_total;
          const uint32_t base = ss.esc_run + warp_offsets(sm.warp_cnt, &tile_total);
          const Window win = {ss.win_mode, ss.win_base};
          const uint32_t ftab0 = ss.ftab[0], ftab1 = ss.ftab[1];
          uint32_t run = 0;
          bool overrun = false, badval = false;
ZC_UNROLL
          for (int s = 0; s < 8; s++) {
            const int e = eb + 32 * s + (int)ln;
            uint32_t q = 0;
            for (int j = 0; j < F.nq; j++) q |= ((shfl(qw[j], s) >> ln) & 1u) << F.q[j];
            const uint32_t code = codes[s];
            uint32_t field;
            if ((em[s] >> ln) & 1u) {
              const uint32_t k = base + run + popc(em[s] & lanemask_lt());
              if (k >= ss.cnt) {
                overrun = true;
                field = 0;
              } else {
                field = ss.dyn[ss.prefix + k];
                if (!escape_valid(F, win, field)) badval = true;
              }
            } else {
              field = byte_of(ftab0, ftab1, code);
            }
            run += popc(em[s]);
            const uint32_t r8 = F.r8 ? sm.stage[e] : 0u;
            const uint32_t r16 = F.r16 ? (uint32_t)sm.stage[kTile + 2 * e] | (uint32_t)sm.stage[kTile + 2 * e + 1] << 8 : 0u;
            x[s] = elem_assemble(F, field & max_field(F), r8, r16, q);
            if (e < tn) sts_elem(sm.dec + e * SZ, SZ, x[s]);
          }
          if (ballot(overrun) != 0 && ln == 0) report_error(P.status, E_CORRUPT, P.chunk_base + (reduce ? r : c), u, D_ESC_OVERRUN);
          if (ballot(badval) != 0 && ln == 0) report_error(P.status, E_CORRUPT, P.chunk_base + (reduce ? r : c), u, D_ESC_VALUE);
          sync();
          CrcAcc ca = {crc_acc[(r * kThreads + tid()) * 2], crc_acc[(r * kThreads + tid()) * 2 + 1], 0};
          crc_tile(ca, sm.crc_t, sm.crc_s, sm.dec, tn * SZ, TB);
          crc_acc[(r * kThreads + tid()) * 2] = ca.full;
          crc_acc[(r * kThreads + tid()) * 2 + 1] = ca.last;
          if (tid() == 0) ss.esc_run += tile_total;
        } else if (ss.kind == KIND_RAW && !ss.bad) {
          const int64_t rb = (u * kZip3Block) / kRawBlock;
          const int64_t within = (u * kZip3Block) % kRawBlock + (int64_t)t * kTile;
          cta_load(sm.stage, ss.st + ss.index_len + rb * ss.full_len + within * SZ, (int64_t)tn * SZ, TB);
          sync();
ZC_UNROLL
          for (int s = 0; s < 8; s++) {
            const int e = eb + 32 * s + (int)ln;
            x[s] = e < tn ? lds_elem(sm.stage + e * SZ, SZ) : 0u;
          }
        } else if (ss.kind == -1) {
          cta_load(sm.stage, ss.st + te * SZ, (int64_t)tn * SZ, TB);
          sync();
ZC_UNROLL
          for (int s = 0; s < 8; s++) {
            const int e = eb + 32 * s + (int)ln;
            x[s] = e < tn ? lds_elem(sm.stage + e * SZ, SZ) : 0u;
          }
        } else {
ZC_UNROLL
          for (int s = 0; s < 8; s++) x[s] = 0;
        }
        // accumulate in rank order
ZC_UNROLL
        for (int s = 0; s < 8; s++) {
          if (nsrc == 1) {
            outv[s] = x[s];
          } else if (r == 0) {
            acc[s] = widen(DT, x[s]);
          } else {
            acc[s] = combine(mul, acc[s], widen(DT, x[s]));
            if (last) outv[s] = narrow(DT, acc[s]);
          }
        }
        sync();  // stage / dec reuse by the next source
      }
      // a plain decode stores the decoded (or staged raw) tile as it is
      const uint8_t* outp = sm.out;
      if (nsrc == 1 && !sm.s[0].bad && sm.s[0].kind >= -1) {
        outp = sm.s[0].kind == KIND_ZIP3 ? sm.dec : sm.stage;
      } else {
ZC_UNROLL
        for (int s = 0; s < 8; s++) {
          const int e = eb + 32 * s + (int)ln;
          if (e < tn) sts_elem(sm.out + e * SZ, SZ, outv[s]);
        }
        sync();
      }
      cta_store(P.dst[c] + te * SZ, outp, (int64_t)tn * SZ);
      sync();
    }

    // phase D: block CRCs and escape totals
    for (int r = 0; r < nsrc; r++) {
      SrcState& ss = sm.s[r];
      if (ss.kind != KIND_ZIP3 || ss.bad) continue;
      // only the last tile of a block can be partial
      const int last_len = (int)((n % kTile) * SZ);
      CrcAcc ca = {crc_acc[(r * kThreads + tid()) * 2], crc_acc[(r * kThreads + tid()) * 2 + 1], last_len};
      uint32_t got = crc_block(ca, kt, TB, n * SZ, (int64_t)kZip3Block * SZ, fin_full, sm.red);
      if (tid() == 0) {
        if (ss.esc_run != ss.cnt) {
          report_error(P.status, E_CORRUPT, P.chunk_base + (reduce ? r : c), u, D_ESC_COUNT);
        } else if (got != ss.crc) {
          report_error(P.status, E_CHECKSUM, P.chunk_base + (reduce ? r : c), u, D_CRC);
        }
      }
    }
    sync();
  }
}

}  // namespace zc
