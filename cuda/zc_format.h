// zc_format.h: the codec's byte format (docs/FORMAT.md) as __host__
// __device__ functions: element layouts, zip3 block layouts, frame plans,
// headers, the window rule (FORMAT.md 3.4), CRC-32C pieces and the float
// conversions of the reduce-scatter's arithmetic (backend/reduce). Shared by
// the CUDA kernels, the C API and the CPU emulation harness.
#pragma once

#include "zc_port.h"

namespace zc {

// backend/dtype values.
enum : int { DT_F32 = 1, DT_BF16 = 3, DT_F16 = 4, DT_E4M3 = 11, DT_E5M2 = 12 };
// Frame kinds (FORMAT.md 1.1).
enum : int { KIND_RAW = 0, KIND_ZIP3 = 1, KIND_HUFF = 2 };

constexpr int kHeaderLen = 32;
constexpr int kIndexEntry = 16;
constexpr int kAlign = 128;
constexpr int kZip3BlockLog = 14;
constexpr int kRawBlockLog = 16;
constexpr int64_t kZip3Block = 1 << kZip3BlockLog;  // 16384 elements
constexpr int64_t kRawBlock = 1 << kRawBlockLog;    // 65536 elements
constexpr int64_t kMaxNumel = (int64_t)1 << 56;
constexpr uint32_t kCrcPoly = 0x82F63B78u;  // CRC-32C, bit-reflected

ZC_HD ZC_INLINE int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Element layout of a coded dtype (zip3 view): exponent field at
// [exp_shift, exp_shift + exp_bits), residue bytes and residue bit planes.
struct Fmt {
  int dtype;
  int size;       // bytes per element
  int exp_shift;  // position of the exponent field
  int exp_bits;   // width of the exponent field
  int mant_bits;  // mantissa width (below the exponent field)
  int r8;         // has an R8 array
  int r16;        // has an R16 array (fp32)
  int nq;         // residue bit planes
  int q[4];       // their bit positions, in plane order
};

ZC_HD ZC_INLINE constexpr Fmt fmt_of(int dtype) {
  Fmt f = {0, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}};
  switch (dtype) {
    case DT_BF16: f = Fmt{DT_BF16, 2, 7, 8, 7, 1, 0, 0, {0, 0, 0, 0}}; break;
    case DT_F32: f = Fmt{DT_F32, 4, 23, 8, 23, 1, 1, 0, {0, 0, 0, 0}}; break;
    case DT_F16: f = Fmt{DT_F16, 2, 10, 5, 10, 1, 0, 3, {8, 9, 15, 0}}; break;
    case DT_E5M2: f = Fmt{DT_E5M2, 1, 2, 5, 2, 0, 0, 3, {0, 1, 7, 0}}; break;
    case DT_E4M3: f = Fmt{DT_E4M3, 1, 3, 4, 3, 0, 0, 4, {0, 1, 2, 7}}; break;
    default: break;
  }
  return f;
}

ZC_HD ZC_INLINE bool coded_dtype(int dtype) { return fmt_of(dtype).size != 0; }
ZC_HD ZC_INLINE constexpr uint32_t max_field(const Fmt& f) { return (1u << f.exp_bits) - 1u; }

// Layout of the static record of one zip3 block of n elements (FORMAT.md 2.2, 3.2).
struct Zip3Layout {
  int64_t n, np;
  int64_t r8, r16;     // offsets, -1 if absent
  int64_t planes;      // code plane j at planes + j*plane_len
  int64_t plane_len;   // np/8
  int64_t res_planes;  // residue plane j at res_planes + j*plane_len
  int64_t arrays_end;  // end of the last array (tail padding up to static_len)
  int64_t static_len;  // multiple of 128
};

ZC_HD ZC_INLINE Zip3Layout zip3_layout(const Fmt& f, int64_t n) {
  Zip3Layout l;
  l.n = n;
  l.np = align_up(n, 128);
  int64_t off = 0;
  l.r8 = -1;
  l.r16 = -1;
  if (f.r8) {
    l.r8 = off;
    off += l.np;
  }
  if (f.r16) {
    l.r16 = off;
    off += 2 * l.np;
  }
  l.plane_len = l.np / 8;
  l.planes = off;
  off += 3 * l.plane_len;
  l.res_planes = off;
  off += f.nq * l.plane_len;
  l.arrays_end = off;
  l.static_len = align_up(off, kAlign);
  return l;
}

// Static layout of a frame of numel elements of kind (zip3 or raw).
struct Plan {
  int kind;
  int block_log;
  int64_t numel;
  int64_t block;  // elements per block
  int64_t nblocks;
  int64_t index_len;
  int64_t full_len;  // static bytes of a full block
  int64_t tail_len;  // static bytes of the last block
  int64_t static_len;
};

ZC_HD ZC_INLINE int64_t block_static(const Fmt& f, int kind, int64_t n) {
  if (kind == KIND_ZIP3) return zip3_layout(f, n).static_len;
  return align_up(n * f.size, kAlign);
}

ZC_HD ZC_INLINE Plan plan_of(const Fmt& f, int kind, int64_t numel) {
  Plan p;
  p.kind = kind;
  p.block_log = kind == KIND_ZIP3 ? kZip3BlockLog : kRawBlockLog;
  p.numel = numel;
  p.block = (int64_t)1 << p.block_log;
  p.nblocks = (numel + p.block - 1) >> p.block_log;
  p.index_len = align_up(kIndexEntry * p.nblocks, kAlign);
  p.full_len = 0;
  p.tail_len = 0;
  p.static_len = 0;
  if (p.nblocks > 0) {
    p.full_len = block_static(f, kind, p.block);
    p.tail_len = block_static(f, kind, numel - (p.nblocks - 1) * p.block);
    p.static_len = p.index_len + (p.nblocks - 1) * p.full_len + p.tail_len;
  }
  return p;
}

ZC_HD ZC_INLINE int64_t raw_frame_len(const Fmt& f, int64_t numel) {
  return kHeaderLen + plan_of(f, KIND_RAW, numel).static_len;
}

// ---------------------------------------------------------------- CRC-32C

// The CRC register after one byte (bit-reflected, no conditioning).
ZC_HD ZC_INLINE uint32_t crc_byte_slow(uint32_t c) {
  for (int k = 0; k < 8; k++) c = (c >> 1) ^ (kCrcPoly & (0u - (c & 1u)));
  return c;
}

// a*b modulo the CRC polynomial, in the reflected representation (x^0 is
// bit 31). Fixed trip count: no divergence on a GPU.
ZC_HD ZC_INLINE uint32_t crc_multmodp(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int i = 0; i < 32; i++) {
    p ^= b & (0u - ((a >> (31 - i)) & 1u));
    b = (b >> 1) ^ (kCrcPoly & (0u - (b & 1u)));
  }
  return p;
}

// x^(8*nbytes) modulo the polynomial: multiplying a raw CRC by it appends
// nbytes zero bytes.
ZC_HD ZC_INLINE uint32_t crc_x8n(uint64_t nbytes) {
  uint32_t p = 1u << 31;  // x^0
  uint32_t t = 1u << 23;  // x^8
  while (nbytes != 0) {
    if (nbytes & 1) p = crc_multmodp(t, p);
    t = crc_multmodp(t, t);
    nbytes >>= 1;
  }
  return p;
}

// CRC-32C of len bytes whose raw CRC (register starting at 0, no final
// inversion) is raw: the standard value with the ~0 start and final xor.
ZC_HD ZC_INLINE uint32_t crc_finish(uint32_t raw, uint64_t len) {
  return ~(raw ^ crc_multmodp(crc_x8n(len), 0xFFFFFFFFu));
}

// Byte-at-a-time update with table t0 (t0[b] = crc_byte_slow(b)).
ZC_HD ZC_INLINE uint32_t crc_update_bytes(const uint32_t* t0, uint32_t c, const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; i++) c = t0[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c;
}

// Slicing-by-4 step over one little-endian word; t holds 4 tables of 256.
ZC_HD ZC_INLINE uint32_t crc_update_word(const uint32_t* t, uint32_t c, uint32_t w) {
  c ^= w;
  return t[768 + (c & 0xFFu)] ^ t[512 + ((c >> 8) & 0xFFu)] ^ t[256 + ((c >> 16) & 0xFFu)] ^ t[c >> 24];
}

// Apply a linear map stored as 4 byte tables (s[k*256 + b] = image of b << 8k).
ZC_HD ZC_INLINE uint32_t crc_apply_map(const uint32_t* s, uint32_t v) {
  return s[v & 0xFFu] ^ s[256 + ((v >> 8) & 0xFFu)] ^ s[512 + ((v >> 16) & 0xFFu)] ^ s[768 + (v >> 24)];
}

// Host-side CRC-32C (headers, tests).
inline uint32_t crc32c_host(const uint8_t* p, int64_t n, uint32_t crc = 0) {
  uint32_t c = ~crc;
  for (int64_t i = 0; i < n; i++) c = crc_byte_slow((c ^ p[i]) & 0xFFu) ^ (c >> 8);
  return ~c;
}

// ---------------------------------------------------------------- headers

ZC_HD ZC_INLINE void put_u32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

ZC_HD ZC_INLINE void put_u64(uint8_t* p, uint64_t v) {
  put_u32(p, (uint32_t)v);
  put_u32(p + 4, (uint32_t)(v >> 32));
}

ZC_HD ZC_INLINE uint32_t get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

ZC_HD ZC_INLINE uint64_t get_u64(const uint8_t* p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

// Builds the 32-byte frame header in h (t0: byte table for the header CRC).
ZC_HD ZC_INLINE void make_header(uint8_t* h, const uint32_t* t0, int kind, int dtype, int64_t numel, int64_t dyn) {
  h[0] = 'Z';
  h[1] = 'C';
  h[2] = 'C';
  h[3] = 'F';
  h[4] = 1;
  h[5] = (uint8_t)kind;
  h[6] = (uint8_t)dtype;
  h[7] = (uint8_t)(kind == KIND_ZIP3 ? kZip3BlockLog : kRawBlockLog);
  put_u64(h + 8, (uint64_t)numel);
  put_u64(h + 16, (uint64_t)dyn);
  put_u32(h + 24, 0);
  put_u32(h + 28, ~crc_update_bytes(t0, 0xFFFFFFFFu, h, 28));
}

// Error codes (same numbers as ZCCL_ERR_* in zipccl_cuda.h).
enum : int {
  E_OK = 0,
  E_CORRUPT = 4,
  E_TRUNCATED = 5,
  E_CHECKSUM = 6,
  E_VERSION = 7,
  E_SIZE = 8,
  E_DTYPE = 9,
  E_KIND = 10,
  E_UNSUPPORTED = 3,
};

struct Header {
  int kind;
  int64_t numel;
  int64_t dyn;
  int64_t static_len;
  int64_t frame_len;
};

// Parses and checks a header as codec.parseHeader does, plus the dtype and
// element count the caller expects. Returns E_OK or an error code.
ZC_HD ZC_INLINE int parse_header(const uint8_t* h, int64_t avail, const uint32_t* t0, int dtype, int64_t numel,
                                 Header* out) {
  if (avail < kHeaderLen) return E_TRUNCATED;
  if (h[0] != 'Z' || h[1] != 'C' || h[2] != 'C' || h[3] != 'F' || h[4] != 1) return E_VERSION;
  if (get_u32(h + 28) != ~crc_update_bytes(t0, 0xFFFFFFFFu, h, 28)) return E_CHECKSUM;
  if (get_u32(h + 24) != 0) return E_CORRUPT;
  uint64_t n = get_u64(h + 8), dyn = get_u64(h + 16);
  int kind = h[5], dt = h[6];
  if (n > (uint64_t)kMaxNumel) return E_CORRUPT;
  if (dt != dtype) return E_DTYPE;  // not the dtype the caller decodes
  if (kind == KIND_HUFF) {
    if (h[7] != 16) return E_CORRUPT;
    return E_UNSUPPORTED;
  }
  if (kind != KIND_ZIP3 && kind != KIND_RAW) return E_CORRUPT;
  if (h[7] != (kind == KIND_ZIP3 ? kZip3BlockLog : kRawBlockLog)) return E_CORRUPT;
  if (dyn > ((uint64_t)1 << 61) || dyn % kAlign != 0 || (kind == KIND_RAW && dyn != 0)) return E_CORRUPT;
  if ((int64_t)n != numel) return E_SIZE;
  Fmt f = fmt_of(dtype);
  Plan p = plan_of(f, kind, (int64_t)n);
  out->kind = kind;
  out->numel = (int64_t)n;
  out->dyn = (int64_t)dyn;
  out->static_len = p.static_len;
  out->frame_len = kHeaderLen + p.static_len + (int64_t)dyn;
  if (avail < out->frame_len) return E_TRUNCATED;
  return E_OK;
}

// ---------------------------------------------------------------- window (FORMAT.md 3.4)

struct Window {
  uint32_t mode;  // 0 plain, 1 zero-aware
  uint32_t base;
};

constexpr int kSamples = 64;

ZC_HD ZC_INLINE int64_t sample_pos(uint32_t k, int64_t n) {
  uint32_t t = (uint32_t)(n / kSamples);
  uint32_t h = k * 2654435761u;
  return (int64_t)k * t + (int64_t)((h >> 16) % t);
}

// floor(c * 2^mant_bits) for c = 0.12 and 0.27, as the Go encoder computes
// it (uint64(c * float64(one))).
ZC_HD ZC_INLINE uint64_t window_const(double c, int mant_bits) {
  return (uint64_t)(c * (double)((uint64_t)1 << mant_bits));
}

// floor((sum + nz c) / (nz 2^mant_bits)) for sum, the sum of nz sampled
// magnitudes (each below 2^(mant_bits + exp_bits)), and c < 2^mant_bits:
// computed as floor(floor((sum + nz c) / 2^mant_bits) / nz), which is the
// same integer, and whose dividend is below nz (2^exp_bits + 1) <= 64 x 257,
// so that a 32-bit division does (a 64-bit one is a long routine on a GPU,
// run by one lane while the CTA waits).
ZC_HD ZC_INLINE int64_t window_mean(uint64_t sum, uint32_t nz, uint64_t c, int mant_bits) {
  return (int64_t)((uint32_t)((sum + (uint64_t)nz * c) >> mant_bits) / nz);
}

ZC_HD ZC_INLINE Window window_from_sums(const Fmt& f, uint64_t sum, uint32_t nz, uint32_t zc, uint32_t cnt) {
  Window w = {0, 0};
  if (nz == 0) return w;
  int64_t maxf = (int64_t)max_field(f);
  if ((uint64_t)zc * 16 >= cnt) {
    int64_t b = window_mean(sum, nz, window_const(0.12, f.mant_bits), f.mant_bits) - 3;
    if (b > maxf - 5) b = maxf - 5;
    if (b >= 2) {
      w.mode = 1;
      w.base = (uint32_t)b;
      return w;
    }
  }
  int64_t b = window_mean(sum, nz, window_const(0.27, f.mant_bits), f.mant_bits) - 4;
  if (b < 0) b = 0;
  if (b > maxf - 6) b = maxf - 6;
  w.mode = 0;
  w.base = (uint32_t)b;
  return w;
}

ZC_HD ZC_INLINE bool window_valid(const Fmt& f, Window w) {
  uint32_t maxf = max_field(f);
  if (w.mode == 0) return w.base + 6 <= maxf;
  if (w.mode == 1) return w.base >= 2 && w.base + 5 <= maxf;
  return false;
}

// 3-bit code of an exponent field (0 = escape).
ZC_HD ZC_INLINE uint32_t code_of(Window w, uint32_t field) {
  if (w.mode == 1) {
    if (field == 0) return 1;
    uint32_t d = field - w.base;
    return d < 6 ? d + 2 : 0;
  }
  uint32_t d = field - w.base;
  return d < 7 ? d + 1 : 0;
}

// An escaped field must fit the format and be one the window cannot code
// (the encoder escapes only those).
ZC_HD ZC_INLINE bool escape_valid(const Fmt& f, Window w, uint32_t field) {
  return field <= max_field(f) && code_of(w, field) == 0;
}

// Exponent field of code c (1..7).
ZC_HD ZC_INLINE uint32_t field_of(Window w, uint32_t c) {
  if (w.mode == 1) return c == 1 ? 0 : w.base + c - 2;
  return w.base + c - 1;
}

// ---------------------------------------------------------------- element split

// The per-format pieces of an element x (zero-extended to 32 bits).
ZC_HD ZC_INLINE uint32_t elem_field(const Fmt& f, uint32_t x) { return (x >> f.exp_shift) & max_field(f); }

ZC_HD ZC_INLINE uint32_t elem_r8(const Fmt& f, uint32_t x) {
  switch (f.dtype) {
    case DT_BF16: return ((x >> 8) & 0x80u) | (x & 0x7Fu);
    case DT_F32: return ((x >> 24) & 0x80u) | ((x >> 16) & 0x7Fu);
    case DT_F16: return x & 0xFFu;
  }
  return 0;
}

ZC_HD ZC_INLINE uint32_t elem_assemble(const Fmt& f, uint32_t field, uint32_t r8, uint32_t r16, uint32_t qbits) {
  uint32_t x = field << f.exp_shift;
  switch (f.dtype) {
    case DT_BF16: x |= ((r8 & 0x80u) << 8) | (r8 & 0x7Fu); break;
    case DT_F32: x |= ((r8 & 0x80u) << 24) | ((r8 & 0x7Fu) << 16) | r16; break;
    case DT_F16: x |= r8; break;
  }
  return x | qbits;
}

ZC_HD ZC_INLINE uint32_t load_elem(const uint8_t* p, int size) {
  switch (size) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
  }
  return get_u32(p);
}

ZC_HD ZC_INLINE void store_elem(uint8_t* p, int size, uint32_t x) {
  p[0] = (uint8_t)x;
  if (size >= 2) p[1] = (uint8_t)(x >> 8);
  if (size == 4) {
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
  }
}

// ---------------------------------------------------------------- reduce arithmetic (backend/reduce)

// The NaN an x86 SSE/AVX instruction returns for x op y (reduce.x86NaN).
ZC_HD ZC_INLINE float x86_nan(float x, float y) {
  if (x != x) return as_float(as_u32(x) | 0x00400000u);
  if (y != y) return as_float(as_u32(y) | 0x00400000u);
  return as_float(0xFFC00000u);
}

ZC_HD ZC_INLINE float combine(bool mul, float x, float y) {
  float r = mul ? fmul_rn(x, y) : fadd_rn(x, y);
  if (r != r) r = x86_nan(x, y);
  return r;
}

ZC_HD ZC_INLINE float f16_to_f32(uint32_t h) {
#if ZC_DEVICE_PASS
  // the instruction is exact but for a NaN's payload: that one bitwise
  const uint32_t n = h & 0x7FFFu;
  const float f = cvt_f16_f32(h);
  return n > 0x7C00u ? as_float(((h & 0x8000u) << 16) | ((n << 13) + (224u << 23)) | 0x00400000u) : f;
#else
  uint32_t em = h & 0x7FFFu;
  uint32_t r = (em << 13) + (112u << 23);
  if (em >= 0x7C00u) {
    r += 112u << 23;
    if (em != 0x7C00u) r |= 0x00400000u;
  } else if (em < 0x0400u) {
    r = as_u32(fmul_rn((float)em, 5.9604644775390625e-8f));  // em * 2^-24, exact
  }
  return as_float(((h & 0x8000u) << 16) | r);
#endif
}

ZC_HD ZC_INLINE float e4m3_to_f32(uint32_t v) {
  uint32_t w = v << 24;
  uint32_t sign = w & 0x80000000u;
  uint32_t nonsign = w & 0x7FFFFFFFu;
  uint32_t shift = clz(nonsign);
  shift = shift > 4 ? shift - 4 : 0;
  uint32_t infnan = (uint32_t)((int32_t)(nonsign + 0x01000000u) >> 8) & 0x7F800000u;
  uint32_t zero = (uint32_t)((int32_t)(nonsign - 1) >> 31);
  return as_float(sign | ((((nonsign << shift >> 4) + ((0x78u - shift) << 23)) | infnan) & ~zero));
}

ZC_HD ZC_INLINE float widen(int dtype, uint32_t x) {
  switch (dtype) {
    case DT_BF16: return as_float(x << 16);
    case DT_F16: return f16_to_f32(x);
    case DT_E4M3: return e4m3_to_f32(x);
    case DT_E5M2: return f16_to_f32(x << 8);
  }
  return as_float(x);
}

ZC_HD ZC_INLINE uint32_t f32_to_bf16(float f) {
  if (f != f) return 0x7FC0u;
  uint32_t u = as_u32(f);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

ZC_HD ZC_INLINE uint32_t f32_to_f16(float f) {
#if ZC_DEVICE_PASS
  // the instruction rounds as below; a NaN keeps its payload bitwise
  const uint32_t v = as_u32(f), n = v & 0x7FFFFFFFu;
  const uint32_t h = cvt_f32_f16(f);
  return n > 0x7F800000u ? (((v >> 16) & 0x8000u) | 0x7E00u | ((n >> 13) & 0x3FFu)) : h;
#else
  uint32_t u = as_u32(f);
  uint32_t a = u & 0x7FFFFFFFu;
  uint32_t sign = (u >> 16) & 0x8000u;
  if (a - 0x38800000u < 0x47800000u - 0x38800000u) {
    a -= 112u << 23;
    a += 0xFFFu + ((a >> 13) & 1u);
    return (sign | (a >> 13)) & 0xFFFFu;
  }
  if (a > 0x7F800000u) return sign | 0x7E00u | ((a >> 13) & 0x3FFu);
  if (a >= 0x47800000u) return sign | 0x7C00u;
  uint32_t e = a >> 23;
  if (e < 102) return sign;
  uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  uint32_t s = 126 - e;
  uint32_t q = m >> s;
  uint32_t r = m & ((1u << s) - 1u);
  uint32_t half = 1u << (s - 1);
  if (r > half || (r == half && (q & 1u))) q++;
  return sign | q;
#endif
}

ZC_HD ZC_INLINE uint32_t f32_to_e4m3(float f) {
  const uint32_t fp8max = 1087u << 20, denorm_min = 121u << 23, denorm = 141u << 23;
  uint32_t u = as_u32(f);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t r;
  if (u >= fp8max) {
    r = u > 0x7F800000u ? 0x7Fu : 0x7Eu;
  } else if (u < denorm_min) {
    r = (as_u32(fadd_rn(as_float(u), as_float(denorm))) - denorm) & 0xFFu;
  } else {
    uint32_t odd = (u >> 20) & 1u;
    u = u - (120u << 23) + 0x7FFFFu + odd;
    r = (u >> 20) & 0xFFu;
    if (r == 0x7Fu) r = 0x7Eu;
  }
  return r | (sign >> 24);
}

ZC_HD ZC_INLINE uint32_t f32_to_e5m2(float f) {
  const uint32_t inf = 255u << 23, fp8max = 143u << 23, denorm_min = 113u << 23, denorm = 134u << 23;
  uint32_t u = as_u32(f);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t r;
  if (u >= fp8max) {
    r = u > inf ? 0x7Fu : 0x7Cu;
  } else if (u < denorm_min) {
    r = (as_u32(fadd_rn(as_float(u), as_float(denorm))) - denorm) & 0xFFu;
  } else {
    uint32_t odd = (u >> 21) & 1u;
    u = u - (112u << 23) + 0xFFFFFu + odd;
    r = (u >> 21) & 0xFFu;
  }
  return r | (sign >> 24);
}

ZC_HD ZC_INLINE uint32_t narrow(int dtype, float f) {
  switch (dtype) {
    case DT_BF16: return f32_to_bf16(f);
    case DT_F16: return f32_to_f16(f);
    case DT_E4M3: return f32_to_e4m3(f);
    case DT_E5M2: return f32_to_e5m2(f);
  }
  return as_u32(f);
}

}  // namespace zc
