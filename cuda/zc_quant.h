// zc_quant.h: the lossy quantization of package quant (backend/quant,
// docs/FORMAT.md 11) as __host__ __device__ CTA bodies, and the format's
// pieces the C API shares with them. The encoder writes the bytes quant's
// Encode writes; the decoder and the accumulator accept exactly the
// messages quant's Decode and Accumulate accept and give their results bit
// for bit (Go on amd64, where the engine runs).
//
// The fp8 mode's bodies are zc_fp8.h's (included at the end); the scan and
// the copy below serve it too. A message is a main part (24-byte header,
// one float32 scale per block, fp8's α after it, the codes) and an exact part (the raw bytes of the blocks that hold a NaN
// or an infinity, in block order). Work decomposition:
//  * one warp per block, grid-stride over the blocks: the block is cut in
//    runs of kQRun = 8 consecutive elements and lane i takes runs i, i + 32,
//    i + 64, ..., so that a warp moves 256 contiguous elements per step (one
//    16-byte load per lane for bfloat16 and float16, two for float32); the
//    block's absmax is a butterfly max over the warp;
//  * the exact part has a variable length, so its offsets come from a scan
//    (quant_scan_cta): one ballot over 32 scales counts the exact blocks of
//    a group of 32 blocks, the 256 groups of a tile (8192 blocks) are
//    scanned over the CTA and the tiles with the decoupled look-back of
//    zc_kernels.h, and each group's prefix is stored in the workspace. An
//    exact block's rank is its group's prefix plus the popcount of one
//    ballot over its group's scales; since every exact block but the
//    message's last is a full one, its bytes start at rank * block * size;
//  * encode: quant_encode_cta (scales and codes, an exact block's codes 0),
//    the scan (the header with the exact count, the exact part's length),
//    quant_copy_cta (the exact blocks into the exact part; its CTAs leave at
//    once when there are none, the usual case);
//  * decode and accumulate: the scan checks the header, every scale, the
//    int4 padding nibble and the exact part's length and block count, then
//    quant_decode_cta / quant_accum_cta check the codes and write.
#pragma once

#include "zc_kernels.h"

namespace zc {

constexpr int kQHeaderLen = 24;
constexpr uint32_t kQExact = 0xFFFFFFFFu;  // the scale of an exact block
constexpr int kQMinLog = 5, kQMaxLog = 16;  // block sizes 32..65536
constexpr int kQRun = 8;                    // elements per lane and step
constexpr int kQStep = 32 * kQRun;          // elements per warp and step
constexpr int kQTileGroups = kThreads;      // groups of 32 blocks per scan tile
enum : int { QMODE_INT8 = 1, QMODE_INT4 = 2, QMODE_FP8 = 3 };
constexpr int kQFp8MaxLog = 10;  // fp8 blocks: 32..1024 (one CTA pass, zc_fp8.h)
// float32(math.MaxFloat32 / Q), the largest scale quant's decoder accepts
// (Q = 127 for int8, 7 for int4, 448 for fp8): a finite block's scale bits
// are 0..q_max_scale(mode).
ZC_HD constexpr uint32_t q_max_scale(int mode) {
  return mode == QMODE_INT4 ? 0x7E124924u : (mode == QMODE_FP8 ? 0x7B124924u : 0x7C010204u);
}
// The kernels (QuantParams::op).
enum : int {
  QOP_ENCODE = 0,
  QOP_SCAN_ENC = 1,
  QOP_COPY = 2,
  QOP_SCAN_DEC = 3,
  QOP_DECODE = 4,
  QOP_ACCUM = 5,
  QOP_ADD_EXACT = 6,  // a rank's own contribution into the accumulators, exact
  QOP_FINISH = 7      // the accumulators, divided (AVG), rounded once
};
constexpr int kQOps = 8;
// Detail codes of DevStatus (after zc_kernels.h's).
enum : int {
  D_Q_HEADER = 13,
  D_Q_SCALE = 14,
  D_Q_CODE = 15,
  D_Q_PADDING = 16,
  D_Q_EXACT = 17,
  D_Q_EXACT_CAP = 18,
  D_Q_ALPHA = 19
};

ZC_HD ZC_INLINE bool q_dtype_ok(int dt) { return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16; }
ZC_HD ZC_INLINE bool q_mode_ok(int m) { return m == QMODE_INT8 || m == QMODE_INT4 || m == QMODE_FP8; }
ZC_HD ZC_INLINE int q_elem_size(int dt) { return dt == DT_F32 ? 4 : 2; }
// Code bytes of the first n elements (int8, int4; n even or the whole
// message). fp8 blocks have B codes each, the block at lo starting at lo.
ZC_HD ZC_INLINE int64_t q_codes_len(int mode, int64_t n) { return mode == QMODE_INT4 ? (n + 1) / 2 : n; }
ZC_HD ZC_INLINE int64_t q_blocks(int64_t numel, int log) { return (numel + ((int64_t)1 << log) - 1) >> log; }
// Bytes per block before the codes: s, and fp8's α after it.
ZC_HD ZC_INLINE int q_scale_len(int mode) { return mode == QMODE_FP8 ? 8 : 4; }
ZC_HD ZC_INLINE int q_max_log(int mode) { return mode == QMODE_FP8 ? kQFp8MaxLog : kQMaxLog; }
ZC_HD ZC_INLINE int64_t q_main_len(int mode, int64_t numel, int log) {
  const int64_t nb = q_blocks(numel, log);
  return kQHeaderLen + q_scale_len(mode) * nb + (mode == QMODE_FP8 ? nb << log : q_codes_len(mode, numel));
}

// log2 of a block size quant takes for mode (a power of two from 32 to
// 65536, fp8 to 1024), or -1.
ZC_HD ZC_INLINE int q_block_log(int mode, int64_t block) {
  for (int k = kQMinLog; k <= q_max_log(mode); k++)
    if (block == ((int64_t)1 << k)) return k;
  return -1;
}

// Workspace of one operation on up to numel elements (any block size):
// status, ticket and totals, one look-back state per scan tile, one prefix
// per group of 32 blocks (block 32 has the most).
ZC_HD ZC_INLINE int64_t q_groups_max(int64_t numel) { return (q_blocks(numel, kQMinLog) + 31) / 32; }
ZC_HD ZC_INLINE int64_t q_tiles_max(int64_t numel) {
  const int64_t t = (q_groups_max(numel) + kQTileGroups - 1) / kQTileGroups;
  return t < 1 ? 1 : t;
}
constexpr int64_t kQWsStates = 256;  // offset of the look-back states
ZC_HD ZC_INLINE int64_t q_ws_prefix_off(int64_t numel) { return kQWsStates + align_up(8 * q_tiles_max(numel), 128); }
ZC_HD ZC_INLINE int64_t q_ws_size(int64_t numel) {
  return q_ws_prefix_off(numel) + align_up(8 * q_groups_max(numel), 128);
}

struct QHeader {
  int mode, dtype, log;
  int64_t numel;
  uint32_t nexact;
};

ZC_HD ZC_INLINE void q_put_header(uint8_t* p, const QHeader& h) {
  p[0] = 'Z';
  p[1] = 'Q';
  p[2] = 1;
  p[3] = (uint8_t)h.mode;
  p[4] = (uint8_t)h.dtype;
  p[5] = (uint8_t)h.log;
  p[6] = 0;
  p[7] = 0;
  put_u64(p + 8, (uint64_t)h.numel);
  put_u32(p + 16, h.nexact);
  put_u32(p + 20, 0);
}

// Parses and checks a main part's header as quant.PeekHeader does:
// E_OK or E_CORRUPT.
ZC_HD ZC_INLINE int q_parse_header(const uint8_t* m, int64_t len, QHeader* h) {
  if (len < kQHeaderLen) return E_CORRUPT;
  if (m[0] != 'Z' || m[1] != 'Q' || m[2] != 1) return E_CORRUPT;
  h->mode = m[3];
  h->dtype = m[4];
  h->log = m[5];
  if (!q_mode_ok(h->mode) || !q_dtype_ok(h->dtype) || h->log < kQMinLog || h->log > q_max_log(h->mode) ||
      (m[6] | m[7]) != 0 ||
      get_u32(m + 20) != 0)
    return E_CORRUPT;
  const uint64_t n = get_u64(m + 8);
  if (n > 2 * (uint64_t)len) return E_CORRUPT;
  h->numel = (int64_t)n;
  h->nexact = get_u32(m + 16);
  if (len != q_main_len(h->mode, h->numel, h->log)) return E_CORRUPT;
  if ((int64_t)h->nexact > q_blocks(h->numel, h->log)) return E_CORRUPT;
  return E_OK;
}

// ---------------------------------------------------------------- parameters

struct QuantParams {
  int32_t op;     // QOP_*
  int32_t dtype;  // encode: the elements' dtype; decode: the output's; accumulate: 0
  int32_t mode;   // encode
  int32_t log;    // encode: log2 of the block size
  int32_t first;  // accumulate, add exact: acc = x' instead of acc + x'
  int32_t div;    // finish: the divisor of an AVG (1: none)
  int64_t numel;
  const uint8_t* src;      // encode: the elements
  uint8_t* main_out;       // encode: the main part (MainLen bytes)
  const uint8_t* main_in;  // the main part (encode: main_out, read back by the scan and the copy)
  int64_t main_len;        // decode, accumulate
  uint8_t* exact_out;      // encode
  const uint8_t* exact_in;
  int64_t exact_len;       // decode, accumulate: its length; encode: exact_out's capacity
  int64_t* exact_len_out;  // encode: the exact part's length (device)
  uint8_t* dst;            // decode: the elements; accumulate: float32 accumulators
  DevStatus* status;
  uint32_t* ticket;        // scan tiles
  uint64_t* qtotal;        // [0] exact blocks, [1] 1 if the exact part fits exact_out (encode)
  uint64_t* states;        // look-back, one per scan tile
  uint64_t* gprefix;       // exact blocks before each group of 32 blocks
};

// The message's header: the encoder's from its parameters, a decoder's
// parsed and checked against the request (the element count; for a decode,
// P.dtype: the message's own, or any when the message is float32; an
// accumulate passes 0, any message).
ZC_HD ZC_INLINE int q_message(const QuantParams& P, QHeader* h) {
  if (P.op <= QOP_COPY) {
    h->mode = P.mode;
    h->dtype = P.dtype;
    h->log = P.log;
    h->numel = P.numel;
    h->nexact = 0;
    return E_OK;
  }
  const int e = q_parse_header(P.main_in, P.main_len, h);
  if (e != E_OK) return e;
  if (h->numel != P.numel) return E_SIZE;
  if (P.dtype != 0 && !(h->dtype == P.dtype || (h->dtype == DT_F32 && q_dtype_ok(P.dtype))))
    return E_DTYPE;
  return E_OK;
}

// ---------------------------------------------------------------- global memory, any alignment

ZC_HD ZC_INLINE U4 ld16g(const uint8_t* p) {
  if (((uintptr_t)p & 15) == 0) return ld16(p);
  U4 r;
  if (((uintptr_t)p & 3) == 0) {
    const uint32_t* s = (const uint32_t*)p;
    r.x = s[0];
    r.y = s[1];
    r.z = s[2];
    r.w = s[3];
  } else {
    r.x = get_u32(p);
    r.y = get_u32(p + 4);
    r.z = get_u32(p + 8);
    r.w = get_u32(p + 12);
  }
  return r;
}

ZC_HD ZC_INLINE void st16g(uint8_t* p, const U4& v) {
  if (((uintptr_t)p & 15) == 0) {
    st16(p, v);
  } else if (((uintptr_t)p & 3) == 0) {
    uint32_t* d = (uint32_t*)p;
    d[0] = v.x;
    d[1] = v.y;
    d[2] = v.z;
    d[3] = v.w;
  } else {
    put_u32(p, v.x);
    put_u32(p + 4, v.y);
    put_u32(p + 8, v.z);
    put_u32(p + 12, v.w);
  }
}

ZC_HD ZC_INLINE void st8g(uint8_t* p, uint32_t lo, uint32_t hi) {
  if (((uintptr_t)p & 7) == 0) {
    *(uint64_t*)p = (uint64_t)hi << 32 | lo;
  } else {
    st32g(p, lo);
    st32g(p + 4, hi);
  }
}

ZC_HD ZC_INLINE void ld8g(const uint8_t* p, uint32_t* lo, uint32_t* hi) {
  if (((uintptr_t)p & 7) == 0) {
    const uint64_t v = *(const uint64_t*)p;
    *lo = (uint32_t)v;
    *hi = (uint32_t)(v >> 32);
  } else {
    *lo = ld32g(p);
    *hi = ld32g(p + 4);
  }
}

// A run: cnt (<= 8) consecutive elements of SZ bytes, zero-extended; the
// elements past cnt read as 0.
template <int SZ>
ZC_HD ZC_INLINE void q_load_run(const uint8_t* p, int cnt, uint32_t (&e)[kQRun]) {
  if (cnt == kQRun) {
    if (SZ == 2) {
      const U4 v = ld16g(p);
      e[0] = v.x & 0xFFFFu;
      e[1] = v.x >> 16;
      e[2] = v.y & 0xFFFFu;
      e[3] = v.y >> 16;
      e[4] = v.z & 0xFFFFu;
      e[5] = v.z >> 16;
      e[6] = v.w & 0xFFFFu;
      e[7] = v.w >> 16;
    } else {
      const U4 a = ld16g(p), b = ld16g(p + 16);
      e[0] = a.x;
      e[1] = a.y;
      e[2] = a.z;
      e[3] = a.w;
      e[4] = b.x;
      e[5] = b.y;
      e[6] = b.z;
      e[7] = b.w;
    }
  } else {
ZC_UNROLL
    for (int k = 0; k < kQRun; k++) e[k] = k < cnt ? load_elem(p + k * SZ, SZ) : 0u;
  }
}

template <int SZ>
ZC_HD ZC_INLINE void q_store_run(uint8_t* p, int cnt, const uint32_t (&e)[kQRun]) {
  if (cnt == kQRun) {
    if (SZ == 2) {
      st16g(p, U4{e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16});
    } else {
      st16g(p, U4{e[0], e[1], e[2], e[3]});
      st16g(p + 16, U4{e[4], e[5], e[6], e[7]});
    }
  } else {
ZC_UNROLL
    for (int k = 0; k < kQRun; k++)
      if (k < cnt) store_elem(p + k * SZ, SZ, e[k]);
  }
}

// The codes of a run: int8 one byte each (8 bytes), int4 two per byte,
// element 2k in the high nibble (4 bytes); q[k] for k >= cnt must be 0,
// which makes an odd count's last low nibble 0.
template <int MODE>
ZC_HD ZC_INLINE void q_store_codes(uint8_t* p, int cnt, const uint32_t (&q)[kQRun]) {
  if (MODE == QMODE_INT8) {
    const uint32_t lo = q[0] | q[1] << 8 | q[2] << 16 | q[3] << 24;
    const uint32_t hi = q[4] | q[5] << 8 | q[6] << 16 | q[7] << 24;
    if (cnt == kQRun) {
      st8g(p, lo, hi);
    } else {
ZC_UNROLL
      for (int k = 0; k < kQRun; k++)
        if (k < cnt) p[k] = (uint8_t)q[k];
    }
  } else {
    uint32_t w = 0;
ZC_UNROLL
    for (int k = 0; k < kQRun / 2; k++) w |= ((q[2 * k] & 15u) << 4 | (q[2 * k + 1] & 15u)) << (8 * k);
    if (cnt == kQRun) {
      st32g(p, w);
    } else {
ZC_UNROLL
      for (int k = 0; k < kQRun / 2; k++)
        if (2 * k < cnt) p[k] = (uint8_t)(w >> (8 * k));
    }
  }
}

// Loads a run's code bytes (int8: 8 in lo:hi; int4: 4 in lo); the bytes
// past the run read as 0.
template <int MODE>
ZC_HD ZC_INLINE void q_load_codes(const uint8_t* p, int cnt, uint32_t* lo, uint32_t* hi) {
  const int nbytes = MODE == QMODE_INT8 ? cnt : (cnt + 1) / 2;
  *lo = 0;
  *hi = 0;
  if (nbytes == (MODE == QMODE_INT8 ? 8 : 4)) {
    if (MODE == QMODE_INT8) {
      ld8g(p, lo, hi);
    } else {
      *lo = ld32g(p);
    }
    return;
  }
  for (int k = 0; k < nbytes; k++) {
    if (k < 4) {
      *lo |= (uint32_t)p[k] << (8 * k);
    } else {
      *hi |= (uint32_t)p[k] << (8 * (k - 4));
    }
  }
}

// True if a byte of v is 0x80 (int8's -128) or a nibble is 8 (int4's -8):
// neither is ever coded (quant's validCodes).
template <int MODE>
ZC_HD ZC_INLINE bool q_bad_word(uint32_t v) {
  if (MODE == QMODE_INT8) {
    const uint32_t x = v ^ 0x80808080u;  // a zero byte where v has 0x80
    return ((x - 0x01010101u) & ~x & 0x80808080u) != 0;
  }
  const uint32_t x = v ^ 0x88888888u;  // a zero nibble where v has 8
  return ((x - 0x11111111u) & ~x & 0x88888888u) != 0;
}

// Code k (0..7) of a run as a float32: int8 byte k, int4 nibble k (high
// nibble first).
template <int MODE>
ZC_HD ZC_INLINE float q_value(uint32_t lo, uint32_t hi, int k) {
  if (MODE == QMODE_INT8) return (float)(int32_t)(int8_t)(uint8_t)byte_of(lo, hi, (uint32_t)k);
  const uint32_t nib = (lo >> (8 * (k >> 1) + ((k & 1) ? 0 : 4))) & 15u;
  return (float)((int32_t)(nib << 28) >> 28);
}

// ---------------------------------------------------------------- element arithmetic (package quant)

// Magnitude bits of an element: for IEEE formats their order as integers
// is the values' order (NaNs above infinity), as quant's absMax compares.
template <int DT>
ZC_HD ZC_INLINE uint32_t q_mag(uint32_t x) {
  return DT == DT_F32 ? x & 0x7FFFFFFFu : x & 0x7FFFu;
}

template <int DT>
ZC_HD ZC_INLINE constexpr uint32_t q_inf() {
  return DT == DT_F32 ? 0x7F800000u : (DT == DT_BF16 ? 0x7F80u : 0x7C00u);
}

// The code of x: rne(x * inv) as package quant computes it, every step a
// float32 operation (the product, then t = y + 1.5 * 2^23, never fused):
// for |y| < 2^22, t's bits are those of 1.5 * 2^23 plus rne(y), whose low
// byte is the code. inv is finite (a block whose inv would overflow travels
// exact).
ZC_HD ZC_INLINE uint32_t q_code(float x, float inv) {
  const uint32_t t = as_u32(fadd_rn(fmul_rn(x, inv), 12582912.0f));
  return (t - 0x4B400000u) & 0xFFu;
}

// acc + v as Go's `a[i] += v` in quant.Accumulate computes it on amd64:
// ADDSS with v as its destination operand, so when both are NaN the result
// is v's (quieted); one NaN gives that one, Inf - Inf the default NaN.
ZC_HD ZC_INLINE float q_add(float acc, float v) {
  float r = fadd_rn(acc, v);
  if (r != r) r = x86_nan(v, acc);
  return r;
}

// ---------------------------------------------------------------- warp helpers

// Exact blocks before block b (the whole warp calls it, with the same b):
// its group's prefix and one ballot over the group's scales (sl bytes
// apart: q_scale_len).
ZC_HD ZC_INLINE uint64_t q_rank(const uint64_t* gprefix, const uint8_t* scales, int sl, int64_t nb, int64_t b) {
  const int64_t k = (b & ~(int64_t)31) + (int64_t)lane();
  const bool ex = k < nb && ld32g(scales + sl * k) == kQExact;
  const uint32_t m = ballot(ex);
  return gprefix[b >> 5] + popc(m & ((1u << (uint32_t)(b & 31)) - 1u));
}

// Copies nbytes with the warp, 16 bytes per lane and step.
ZC_HD ZC_INLINE void q_warp_copy(uint8_t* dst, const uint8_t* src, int64_t nbytes) {
  for (int64_t i = 16 * (int64_t)lane(); i < nbytes; i += 16 * 32) {
    if (i + 16 <= nbytes) {
      st16g(dst + i, ld16g(src + i));
    } else {
      for (int64_t k = i; k < nbytes; k++) dst[k] = src[k];
    }
  }
}

// Elements of the run that starts at element e of a block of n (0..8).
ZC_HD ZC_INLINE int q_run_count(int64_t n, int64_t e) {
  const int64_t r = n - e;
  return r <= 0 ? 0 : (r >= kQRun ? kQRun : (int)r);
}

// ---------------------------------------------------------------- encode

template <int DT, int MODE>
ZC_HD void q_encode_blocks(const QuantParams& P) {
  constexpr int SZ = DT == DT_F32 ? 4 : 2;
  const float Q = MODE == QMODE_INT4 ? 7.0f : 127.0f;
  const int64_t B = (int64_t)1 << P.log;
  const int64_t nb = q_blocks(P.numel, P.log);
  uint8_t* scales = P.main_out + kQHeaderLen;
  uint8_t* codes = scales + 4 * nb;
  const unsigned ln = lane();
  const int64_t nw = (int64_t)nbid() * kWarps;
  for (int64_t b = (int64_t)bid() * kWarps + warp(); b < nb; b += nw) {
    const int64_t lo = b * B;
    const int64_t n = P.numel - lo < B ? P.numel - lo : B;
    const uint8_t* src = P.src + lo * SZ;
    const int steps = (int)((n + kQStep - 1) / kQStep);
    uint32_t m = 0;
    for (int s = 0; s < steps; s++) {
      const int64_t e = ((int64_t)s * 32 + ln) * kQRun;
      const int cnt = q_run_count(n, e);
      if (cnt > 0) {
        uint32_t x[kQRun];
        q_load_run<SZ>(src + e * SZ, cnt, x);
ZC_UNROLL
        for (int k = 0; k < kQRun; k++) {
          const uint32_t a = q_mag<DT>(x[k]);
          m = a > m ? a : m;
        }
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const uint32_t a = shfl_xor(m, (unsigned)o);
      m = a > m ? a : m;
    }
    // quant.Encode: an exact block (NaN or infinity) or an all-zero one has
    // all codes 0
    bool zero = m >= q_inf<DT>() || m == 0;
    uint32_t sbits = m >= q_inf<DT>() ? kQExact : 0u;
    float inv = 0.0f;
    if (!zero) {
      const float amax = widen(DT, m);
      inv = fdiv_rn(Q, amax);
      if ((as_u32(inv) & 0x7FFFFFFFu) == 0x7F800000u) {
        // absmax < Q / MaxFloat32: inv overflows, the block travels exact
        zero = true;
        sbits = kQExact;
      } else {
        sbits = as_u32(fdiv_rn(amax, Q));
      }
    }
    if (ln == 0) st32g(scales + 4 * b, sbits);
    uint8_t* out = codes + q_codes_len(MODE, lo);  // lo is even: whole bytes
    for (int s = 0; s < steps; s++) {
      const int64_t e = ((int64_t)s * 32 + ln) * kQRun;
      const int cnt = q_run_count(n, e);
      if (cnt > 0) {
        uint32_t q[kQRun];
        if (zero) {
ZC_UNROLL
          for (int k = 0; k < kQRun; k++) q[k] = 0;
        } else {
          uint32_t x[kQRun];
          q_load_run<SZ>(src + e * SZ, cnt, x);
ZC_UNROLL
          for (int k = 0; k < kQRun; k++) q[k] = k < cnt ? q_code(widen(DT, x[k]), inv) : 0u;
        }
        q_store_codes<MODE>(out + (MODE == QMODE_INT4 ? e / 2 : e), cnt, q);
      }
    }
  }
}

template <int DT>
ZC_HD ZC_INLINE void q_encode_dt(const QuantParams& P) {
  if (P.mode == QMODE_INT4) {
    q_encode_blocks<DT, QMODE_INT4>(P);
  } else {
    q_encode_blocks<DT, QMODE_INT8>(P);
  }
}

// fp8 (zc_fp8.h, included at the end): one thread per element, a CTA pass
// over kThreads elements; decode and accumulate check the codes.
ZC_HD inline void q_fp8_encode(const QuantParams& P);
ZC_HD inline void q_fp8_decode(const QuantParams& P, const QHeader& h);
ZC_HD inline void q_fp8_accum(const QuantParams& P, const QHeader& h);

// Scales and codes of every block (int8 and int4: one warp per block;
// fp8: q_fp8_encode; grid size is free).
ZC_HD inline void quant_encode_cta(const QuantParams& P) {
  if (P.mode == QMODE_FP8) {
    q_fp8_encode(P);
    return;
  }
  switch (P.dtype) {
    case DT_BF16: q_encode_dt<DT_BF16>(P); break;
    case DT_F16: q_encode_dt<DT_F16>(P); break;
    default: q_encode_dt<DT_F32>(P); break;
  }
}

// The exact blocks' raw bytes into the exact part, after the scan (one warp
// per block; grid size is free). Nothing to do, the usual case: every CTA
// leaves after reading one word.
ZC_HD inline void quant_copy_cta(const QuantParams& P) {
  if (P.qtotal[0] == 0 || P.qtotal[1] == 0) return;  // no exact block, or exact_out too small (reported)
  const int SZ = q_elem_size(P.dtype);
  const int sl = q_scale_len(P.mode);
  const int64_t B = (int64_t)1 << P.log;
  const int64_t nb = q_blocks(P.numel, P.log);
  const uint8_t* scales = P.main_in + kQHeaderLen;
  const int64_t nw = (int64_t)nbid() * kWarps;
  for (int64_t b = (int64_t)bid() * kWarps + warp(); b < nb; b += nw) {
    if (ld32g(scales + sl * b) != kQExact) continue;
    const uint64_t rank = q_rank(P.gprefix, scales, sl, nb, b);
    const int64_t lo = b * B;
    const int64_t n = P.numel - lo < B ? P.numel - lo : B;
    q_warp_copy(P.exact_out + (int64_t)rank * B * SZ, P.src + lo * SZ, n * SZ);
  }
}

// ---------------------------------------------------------------- the exact blocks' scan

struct QScanSmem {
  uint32_t warp_cnt[kWarps];
  int64_t job;
  uint64_t prefix;
};

// The last tile's thread 0, with the message's exact block count: the
// encoder writes the header and the exact part's length; a decoder checks
// them (quant's walk: the count against the header, the length against
// the exact part given) and the int4 padding nibble.
ZC_HD ZC_INLINE void q_scan_finish(const QuantParams& P, const QHeader& h, int64_t nb, uint64_t total) {
  const int64_t B = (int64_t)1 << h.log;
  const bool last_exact = nb > 0 && ld32g(P.main_in + kQHeaderLen + q_scale_len(h.mode) * (nb - 1)) == kQExact;
  const int64_t bytes = ((int64_t)total * B - (last_exact ? nb * B - h.numel : 0)) * q_elem_size(h.dtype);
  if (P.op == QOP_SCAN_ENC) {
    QHeader o = h;
    o.nexact = (uint32_t)total;  // as quant.putHeader
    q_put_header(P.main_out, o);
    *P.exact_len_out = bytes;
    P.qtotal[0] = total;
    P.qtotal[1] = bytes <= P.exact_len ? 1u : 0u;
    if (bytes > P.exact_len) report_error(P.status, E_TRUNCATED, 0, -1, D_Q_EXACT_CAP);
    return;
  }
  if (total != (uint64_t)h.nexact || bytes != P.exact_len) report_error(P.status, E_CORRUPT, 0, -1, D_Q_EXACT);
  if (h.mode == QMODE_INT4 && (h.numel & 1) != 0 && (P.main_in[P.main_len - 1] & 15u) != 0)
    report_error(P.status, E_CORRUPT, 0, nb - 1, D_Q_PADDING);
}

// Counts the exact blocks (persistent CTAs taking tiles of 8192 blocks
// from a ticket; grid size is free) and stores each group's prefix; a
// decoder's scan also checks every scale (quant's walk: >= 0, not -0,
// finite, at most MaxFloat32/127, or the exact mark) and the header.
ZC_HD inline void quant_scan_cta(const QuantParams& P) {
  QHeader h;
  const int err = q_message(P, &h);
  if (err != E_OK) {
    if (bid() == 0 && tid() == 0) report_error(P.status, err, 0, -1, D_Q_HEADER);
    return;
  }
  const bool dec = P.op == QOP_SCAN_DEC;
  QScanSmem& sm = *reinterpret_cast<QScanSmem*>(smem());
  const int64_t nb = q_blocks(h.numel, h.log);
  const int64_t ngroups = (nb + 31) >> 5;
  const int64_t ntiles = ngroups == 0 ? 1 : (ngroups + kQTileGroups - 1) / kQTileGroups;
  const uint8_t* scales = P.main_in + kQHeaderLen;
  const int sl = q_scale_len(h.mode);
  const unsigned w = warp(), ln = lane();
  for (;;) {
    if (tid() == 0) sm.job = (int64_t)atomic_add_u32(P.ticket, 1);
    sync();
    const int64_t job = sm.job;
    if (job >= ntiles) break;
    // warp w counts groups g0 .. g0+31 of the tile, one ballot each; lane k
    // keeps group g0+k's count, so thread t holds the tile's group t
    const int64_t g0 = job * kQTileGroups + 32 * (int64_t)w;
    const int64_t left = ngroups - g0;
    const int kmax = left <= 0 ? 0 : (left >= 32 ? 32 : (int)left);
    uint32_t mine = 0;
    for (int k = 0; k < kmax; k++) {
      const int64_t blk = (g0 + k) * 32 + ln;
      const uint32_t bits = blk < nb ? ld32g(scales + sl * blk) : 0u;
      const bool ex = blk < nb && bits == kQExact;
      if (dec && !ex && bits > q_max_scale(h.mode)) report_error(P.status, E_CORRUPT, 0, blk, D_Q_SCALE);
      // fp8's α: +0 to MaxFloat32 (quant's walk; an exact block's is not read)
      if (dec && blk < nb && !ex && sl == 8 && ld32g(scales + sl * blk + 4) > 0x7F7FFFFFu)
        report_error(P.status, E_CORRUPT, 0, blk, D_Q_ALPHA);
      const uint32_t cnt = popc(ballot(ex));
      if (ln == (unsigned)k) mine = cnt;
    }
    uint32_t tile_total;
    const uint32_t off = cta_exclusive_scan(mine, sm.warp_cnt, &tile_total);
    if (tid() == 0) lookback_publish(P.states, job, tile_total);
    if (w == 0) {
      const uint64_t pre = lookback_prefix(P.states, job, tile_total);
      if (ln == 0) sm.prefix = pre;
    }
    sync();
    const uint64_t prefix = sm.prefix;
    const int64_t g = job * kQTileGroups + tid();
    if (g < ngroups) P.gprefix[g] = prefix + off;
    if (job == ntiles - 1 && tid() == 0) q_scan_finish(P, h, nb, prefix + tile_total);
    sync();
  }
}

// ---------------------------------------------------------------- decode and accumulate

// quant.Decode: x' = float32(code) * scale rounded to OUT (codeTable); an
// exact block copied, or narrowed when the message is float32.
template <int OUT, int MODE>
ZC_HD void q_decode_blocks(const QuantParams& P, const QHeader& h) {
  constexpr int OSZ = OUT == DT_F32 ? 4 : 2;
  const int MSZ = q_elem_size(h.dtype);
  const int64_t B = (int64_t)1 << h.log;
  const int64_t nb = q_blocks(h.numel, h.log);
  const uint8_t* scales = P.main_in + kQHeaderLen;
  const uint8_t* codes = scales + 4 * nb;
  const unsigned ln = lane();
  const int64_t nw = (int64_t)nbid() * kWarps;
  for (int64_t b = (int64_t)bid() * kWarps + warp(); b < nb; b += nw) {
    const int64_t lo = b * B;
    const int64_t n = h.numel - lo < B ? h.numel - lo : B;
    const int steps = (int)((n + kQStep - 1) / kQStep);
    const uint32_t sbits = ld32g(scales + 4 * b);
    uint8_t* out = P.dst + lo * OSZ;
    if (sbits == kQExact) {
      const int64_t off = (int64_t)q_rank(P.gprefix, scales, 4, nb, b) * B * MSZ;
      if (off + n * MSZ > P.exact_len) continue;  // the scan reported it; nothing past the part is read
      const uint8_t* raw = P.exact_in + off;
      if (h.dtype == OUT) {
        q_warp_copy(out, raw, n * OSZ);
        continue;
      }
      for (int s = 0; s < steps; s++) {  // a float32 message into bfloat16 / float16 (reduce.Narrow)
        const int64_t e = ((int64_t)s * 32 + ln) * kQRun;
        const int cnt = q_run_count(n, e);
        if (cnt > 0) {
          uint32_t x[kQRun];
          q_load_run<4>(raw + e * 4, cnt, x);
ZC_UNROLL
          for (int k = 0; k < kQRun; k++) x[k] = narrow(OUT, as_float(x[k]));
          q_store_run<OSZ>(out + e * OSZ, cnt, x);
        }
      }
      continue;
    }
    if (sbits > q_max_scale(MODE)) continue;  // reported by the scan
    const float scale = as_float(sbits);
    const uint8_t* bc = codes + q_codes_len(MODE, lo);
    for (int s = 0; s < steps; s++) {
      const int64_t e = ((int64_t)s * 32 + ln) * kQRun;
      const int cnt = q_run_count(n, e);
      if (cnt > 0) {
        uint32_t clo, chi;
        q_load_codes<MODE>(bc + (MODE == QMODE_INT4 ? e / 2 : e), cnt, &clo, &chi);
        if (q_bad_word<MODE>(clo) || q_bad_word<MODE>(chi)) report_error(P.status, E_CORRUPT, 0, b, D_Q_CODE);
        uint32_t x[kQRun];
ZC_UNROLL
        for (int k = 0; k < kQRun; k++) x[k] = narrow(OUT, fmul_rn(q_value<MODE>(clo, chi, k), scale));
        q_store_run<OSZ>(out + e * OSZ, cnt, x);
      }
    }
  }
}

// quant.Accumulate: acc = acc + float32(code) * scale (the product
// rounded, then the sum), or the product with first; an exact block's
// elements widened to float32 and added (or copied).
template <int MODE>
ZC_HD void q_accum_blocks(const QuantParams& P, const QHeader& h) {
  const int MDT = h.dtype;
  const int MSZ = q_elem_size(MDT);
  const bool first = P.first != 0;
  const int64_t B = (int64_t)1 << h.log;
  const int64_t nb = q_blocks(h.numel, h.log);
  const uint8_t* scales = P.main_in + kQHeaderLen;
  const uint8_t* codes = scales + 4 * nb;
  const unsigned ln = lane();
  const int64_t nw = (int64_t)nbid() * kWarps;
  for (int64_t b = (int64_t)bid() * kWarps + warp(); b < nb; b += nw) {
    const int64_t lo = b * B;
    const int64_t n = h.numel - lo < B ? h.numel - lo : B;
    const int steps = (int)((n + kQStep - 1) / kQStep);
    const uint32_t sbits = ld32g(scales + 4 * b);
    uint8_t* acc = P.dst + lo * 4;
    if (sbits == kQExact) {
      const int64_t off = (int64_t)q_rank(P.gprefix, scales, 4, nb, b) * B * MSZ;
      if (off + n * MSZ > P.exact_len) continue;  // the scan reported it
      const uint8_t* raw = P.exact_in + off;
      for (int s = 0; s < steps; s++) {
        const int64_t e = ((int64_t)s * 32 + ln) * kQRun;
        const int cnt = q_run_count(n, e);
        if (cnt > 0) {
          uint32_t x[kQRun], a[kQRun];
          if (MSZ == 4) {
            q_load_run<4>(raw + e * 4, cnt, x);
          } else {
            q_load_run<2>(raw + e * 2, cnt, x);
          }
          if (!first) q_load_run<4>(acc + e * 4, cnt, a);
ZC_UNROLL
          for (int k = 0; k < kQRun; k++) {
            const float v = widen(MDT, x[k]);
            a[k] = first ? as_u32(v) : as_u32(q_add(as_float(a[k]), v));
          }
          q_store_run<4>(acc + e * 4, cnt, a);
        }
      }
      continue;
    }
    if (sbits > q_max_scale(MODE)) continue;  // reported by the scan
    const float scale = as_float(sbits);
    const uint8_t* bc = codes + q_codes_len(MODE, lo);
    for (int s = 0; s < steps; s++) {
      const int64_t e = ((int64_t)s * 32 + ln) * kQRun;
      const int cnt = q_run_count(n, e);
      if (cnt > 0) {
        uint32_t clo, chi;
        q_load_codes<MODE>(bc + (MODE == QMODE_INT4 ? e / 2 : e), cnt, &clo, &chi);
        if (q_bad_word<MODE>(clo) || q_bad_word<MODE>(chi)) report_error(P.status, E_CORRUPT, 0, b, D_Q_CODE);
        uint32_t a[kQRun];
        if (!first) q_load_run<4>(acc + e * 4, cnt, a);
ZC_UNROLL
        for (int k = 0; k < kQRun; k++) {
          const float p = fmul_rn(q_value<MODE>(clo, chi, k), scale);
          a[k] = first ? as_u32(p) : as_u32(q_add(as_float(a[k]), p));
        }
        q_store_run<4>(acc + e * 4, cnt, a);
      }
    }
  }
}

// True in every lane of the warp when the status holds an error: nothing
// to decode. Lane 0's reading for the whole warp, since another warp may
// report one meanwhile and a warp's lanes must all reach its ballots.
ZC_HD ZC_INLINE bool q_failed(const QuantParams& P) {
  uint32_t code = 0;
  if (lane() == 0) code = *(volatile uint32_t*)&P.status->code;
  return shfl(code, 0) != 0;
}

// Decode (one warp per block, or fp8's CTA passes; grid size is free),
// after the scan.
ZC_HD inline void quant_decode_cta(const QuantParams& P) {
  QHeader h;
  if (q_message(P, &h) != E_OK) return;  // reported by the scan
  if (h.mode == QMODE_FP8) {
    q_fp8_decode(P, h);  // which checks the status for the whole CTA
    return;
  }
  if (q_failed(P)) return;
  const bool i4 = h.mode == QMODE_INT4;
  switch (P.dtype) {
    case DT_BF16: i4 ? q_decode_blocks<DT_BF16, QMODE_INT4>(P, h) : q_decode_blocks<DT_BF16, QMODE_INT8>(P, h); break;
    case DT_F16: i4 ? q_decode_blocks<DT_F16, QMODE_INT4>(P, h) : q_decode_blocks<DT_F16, QMODE_INT8>(P, h); break;
    default: i4 ? q_decode_blocks<DT_F32, QMODE_INT4>(P, h) : q_decode_blocks<DT_F32, QMODE_INT8>(P, h); break;
  }
}

// Accumulate (one warp per block, or fp8's CTA passes; grid size is
// free), after the scan.
ZC_HD inline void quant_accum_cta(const QuantParams& P) {
  QHeader h;
  if (q_message(P, &h) != E_OK) return;  // reported by the scan
  if (h.mode == QMODE_FP8) {
    q_fp8_accum(P, h);
    return;
  }
  if (q_failed(P)) return;
  if (h.mode == QMODE_INT4) {
    q_accum_blocks<QMODE_INT4>(P, h);
  } else {
    q_accum_blocks<QMODE_INT8>(P, h);
  }
}

// The lossy reductions' own steps (backend/lossy's addExact and finish),
// elementwise over a grid-stride loop. Add exact: the accumulators at dst
// (float32) take src's elements (P.dtype) widened, added as quant's
// Accumulate adds (q_add), or set with P.first. Finish: src's float32
// accumulators, divided by P.div when it is more than 1, rounded to
// P.dtype once into dst.
ZC_HD inline void quant_add_exact_cta(const QuantParams& P) {
  const int SZ = q_elem_size(P.dtype);
  float* acc = (float*)P.dst;
  for (int64_t i = (int64_t)bid() * kThreads + tid(); i < P.numel; i += (int64_t)nbid() * kThreads) {
    const float v = widen(P.dtype, load_elem(P.src + i * SZ, SZ));
    acc[i] = P.first ? v : q_add(acc[i], v);
  }
}

ZC_HD inline void quant_finish_cta(const QuantParams& P) {
  const int SZ = q_elem_size(P.dtype);
  const float* acc = (const float*)P.src;
  const float d = (float)P.div;
  for (int64_t i = (int64_t)bid() * kThreads + tid(); i < P.numel; i += (int64_t)nbid() * kThreads) {
    const float v = P.div > 1 ? fdiv_rn(acc[i], d) : acc[i];
    store_elem(P.dst + i * SZ, SZ, narrow(P.dtype, v));
  }
}

struct QFp8Smem;
ZC_HD ZC_INLINE size_t q_fp8_smem_bytes();

// Dynamic shared memory of op's kernel: the scan's, and fp8's for the
// kernels that may code or decode it (a decoder learns the mode on the
// device).
ZC_HD ZC_INLINE size_t quant_smem_bytes(int op) {
  if (op == QOP_SCAN_ENC || op == QOP_SCAN_DEC) return sizeof(QScanSmem);
  return op == QOP_COPY || op == QOP_ADD_EXACT || op == QOP_FINISH ? 0 : q_fp8_smem_bytes();
}

// Any of the kernels by P.op (the emulator's single entry point).
ZC_HD inline void quant_cta(const QuantParams& P) {
  switch (P.op) {
    case QOP_ENCODE: quant_encode_cta(P); break;
    case QOP_SCAN_ENC:
    case QOP_SCAN_DEC: quant_scan_cta(P); break;
    case QOP_COPY: quant_copy_cta(P); break;
    case QOP_DECODE: quant_decode_cta(P); break;
    case QOP_ACCUM: quant_accum_cta(P); break;
    case QOP_ADD_EXACT: quant_add_exact_cta(P); break;
    case QOP_FINISH: quant_finish_cta(P); break;
  }
}

}  // namespace zc

#include "zc_fp8.h"  // the fp8 bodies declared above
