// zc_fp8.h: quant's fp8 mode (TACO: E4M3 codes of each block's
// Walsh-Hadamard transform; backend/quant/fp8.go, docs/FORMAT.md 11, "Coding
// an fp8 block") as __host__ __device__ CTA bodies, giving fp8.go's bytes
// and values bit for bit. The message layout, the scan of the exact blocks
// and the copy are zc_quant.h's (with 8 bytes, s then α, per block).
//
// One thread per element: a CTA pass takes kThreads = 256 elements, i.e.
// 256 / B whole blocks for B <= 256 (a warp never straddles two, B >= 32);
// for B = 512 and 1024 one block, thread t holding elements t, t + 256, ...
// (E = B / 256 of them). A pass, for each block:
//  * the sum of squares as fp8.go's tree, t_i += t_{i+h} for h = B/2 .. 1:
//    h >= 256 in registers, 32 <= h < 256 in shared memory, then xor
//    shuffles 16 .. 1, after which lane 0 holds the tree's sum (the lanes
//    above it hold other sums of the same terms, unused);
//  * the transform's butterflies in fp8.go's order, h = 1, 2, ..., B/2:
//    h < 32 by xor shuffles, h < 256 through shared memory (two buffers,
//    one barrier per stage), h >= 256 in registers; each output exactly
//    a + b or a - b, a the lower index;
//  * max|u| as the largest magnitude bits (a NaN's are above +Inf's, so a
//    transform that is not finite shows), over the warp by shuffles and
//    over the block's warps through shared memory;
//  * the codes, from groups of 4 lanes as one 32-bit store each.
// Every loop bound is uniform over the CTA, so every thread reaches every
// barrier and shuffle; blocks past the message's end compute on zeros and
// store nothing. Every product, sum, quotient and root is its own correctly
// rounded float32 operation (zc_port.h: never contracted, never flushed).
#pragma once

#include "zc_quant.h"

namespace zc {

constexpr int kFp8Slots = 4;                  // elements per thread at B = 1024
constexpr uint32_t kFp8TinyBits = 0x0D800000u;  // 2^-100: fp8.go's fp8Tiny
constexpr float kFp8Max = 448.0f;               // E4M3's largest value (fp8Max, and TACO's τ)
constexpr float kFp8Eps = 1e-6f;                // fp8Eps, rounded to float32 as Go rounds it

struct QFp8Smem {
  float fw[2][kFp8Slots * kThreads];  // the transform's exchanges (two buffers)
  float sum[kThreads];                // the tree's exchanges
  uint32_t wmax[kWarps];              // each warp's largest magnitude
  uint32_t failed;                    // the status, read once for the CTA
};

ZC_HD ZC_INLINE size_t q_fp8_smem_bytes() { return sizeof(QFp8Smem); }

// E4M3 (float8_e4m3fn) code of f, rounded to nearest even, saturating to
// ±448, NaN to 0x7F with f's sign: dtype.F32ToE4M3FN (torch's conversion),
// in integers only. Its magnitudes below 2^-6 (the subnormal codes), which
// Go rounds with a float add of 2^14, are rounded here from the bits:
// |f| * 2^9 = m >> (141 - e), m the significand, e the biased exponent
// (checked equal for all 2^30 such magnitudes).
ZC_HD ZC_INLINE uint32_t fp8_code(float f) {
  uint32_t u = as_u32(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t r;
  if (u >= (1087u << 20)) {  // 480 and above, Inf, NaN
    r = u > 0x7F800000u ? 0x7Fu : 0x7Eu;
  } else if (u < (121u << 23)) {
    uint32_t e = u >> 23, m = u & 0x7FFFFFu;
    if (e != 0) {
      m |= 0x800000u;
    } else {
      e = 1;
    }
    const uint32_t sh = 141u - e;  // >= 21
    if (sh > 25) {
      r = 0;  // below 2^-10: rounds to 0
    } else {
      const uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
      r = q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);
    }
  } else {
    const uint32_t odd = (u >> 20) & 1u;
    u = u - (120u << 23) + 0x7FFFFu + odd;  // rebias (127 - 7) and round
    r = (u >> 20) & 0xFFu;
    if (r == 0x7Fu) r = 0x7Eu;  // rounding carried into the NaN encoding
  }
  return r | (sign >> 24);
}

// The value of an E4M3 code, 0 for the NaN codes (fp8Scratch.val; such a
// code makes the message corrupt anyway).
ZC_HD ZC_INLINE float fp8_value(uint32_t c) { return (c & 0x7Fu) == 0x7Fu ? 0.0f : e4m3_to_f32(c); }

// Where a thread sits in a pass over blocks of 2^log elements: the block
// within the pass (sub), its element j (of slot 0; slot e holds j + 256 e)
// and the blocks per pass (G).
struct Fp8Lane {
  int B, C;   // block size, and elements of a block per slot (min(B, 256))
  int G;      // blocks per pass
  int j;      // element of slot 0 within the block
  int sub;    // block within the pass
};

ZC_HD ZC_INLINE Fp8Lane fp8_lane(int log) {
  Fp8Lane L;
  const int t = (int)tid();
  L.B = 1 << log;
  L.C = L.B < kThreads ? L.B : kThreads;
  L.G = kThreads / L.C;
  L.j = t & (L.C - 1);
  L.sub = t / L.C;
  return L;
}

// u = H u, unnormalised, in place: fp8.go's fwht, stage for stage. The
// shared-memory stages alternate between two buffers, k the next one, kept
// across passes: a stage's writes never meet the reads of the stage before
// it (which may be the previous pass's last), one barrier per stage.
template <int E>
ZC_HD ZC_INLINE void fp8_fwht(float (&u)[E], const Fp8Lane& L, QFp8Smem& sm, int& k) {
  for (unsigned h = 1; h < 32; h <<= 1) {
    const bool hi = (L.j & (int)h) != 0;
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      const float v = as_float(shfl_xor(as_u32(u[e]), h));
      u[e] = hi ? fsub_rn(v, u[e]) : fadd_rn(u[e], v);
    }
  }
  const int t = (int)tid();
  for (int h = 32; h < L.C; h <<= 1, k ^= 1) {
    float* buf = sm.fw[k];
ZC_UNROLL
    for (int e = 0; e < E; e++) buf[e * kThreads + t] = u[e];
    sync();
    const bool hi = (L.j & h) != 0;
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      const float v = buf[e * kThreads + (t ^ h)];
      u[e] = hi ? fsub_rn(v, u[e]) : fadd_rn(u[e], v);
    }
  }
ZC_UNROLL
  for (int hs = 1; hs < E; hs <<= 1) {  // h = 256 hs: slots e and e + hs
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      if ((e & hs) == 0) {
        const float a = u[e], b = u[e + hs];
        u[e] = fadd_rn(a, b);
        u[e + hs] = fsub_rn(a, b);
      }
    }
  }
}

// Σ x_i² as fp8.go's fp8Alpha adds it, exact in the block's thread j = 0.
template <int E>
ZC_HD ZC_INLINE float fp8_sumsq(const float (&x)[E], const Fp8Lane& L, QFp8Smem& sm) {
  float t[E];
ZC_UNROLL
  for (int e = 0; e < E; e++) t[e] = fmul_rn(x[e], x[e]);
ZC_UNROLL
  for (int hs = E / 2; hs >= 1; hs >>= 1) {  // h = 256 hs
ZC_UNROLL
    for (int e = 0; e < hs; e++) t[e] = fadd_rn(t[e], t[e + hs]);
  }
  float s = t[0];
  if (L.C > 32) {
    const int i = (int)tid();
    sm.sum[i] = s;
    sync();
    for (int h = L.C / 2; h >= 32; h >>= 1) {
      if (L.j < h) sm.sum[i] = fadd_rn(sm.sum[i], sm.sum[i + h]);
      sync();
    }
    s = sm.sum[i];
  }
  for (unsigned o = 16; o > 0; o >>= 1) s = fadd_rn(s, as_float(shfl_xor(as_u32(s), o)));
  return s;
}

// The block's largest magnitude bits of u (every thread of the block gets
// them). Magnitudes compare as integers; NaN's are above +Inf's.
template <int E>
ZC_HD ZC_INLINE uint32_t fp8_absmax(const float (&u)[E], const Fp8Lane& L, QFp8Smem& sm) {
  uint32_t m = 0;
ZC_UNROLL
  for (int e = 0; e < E; e++) {
    const uint32_t a = as_u32(u[e]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  for (unsigned o = 16; o > 0; o >>= 1) {
    const uint32_t a = shfl_xor(m, o);
    m = a > m ? a : m;
  }
  if (L.C > 32) {
    if (lane() == 0) sm.wmax[warp()] = m;
    sync();
    const int nw = L.C / 32, w0 = (int)warp() & ~(nw - 1);
    for (int w = 0; w < nw; w++) {
      const uint32_t a = sm.wmax[w0 + w];
      m = a > m ? a : m;
    }
  }
  return m;
}

// TACO's α = τ / sqrt(S / m + ε) for a block of m elements whose squares
// sum to S (0 when S overflowed).
ZC_HD ZC_INLINE float fp8_alpha(float S, int64_t m) {
  return fdiv_rn(kFp8Max, fsqrt_rn(fadd_rn(fdiv_rn(S, (float)m), kFp8Eps)));
}

// An element of SZ bytes, with one access when aligned.
template <int SZ>
ZC_HD ZC_INLINE uint32_t fp8_ld(const uint8_t* p) {
  if (((uintptr_t)p & (SZ - 1)) != 0) return load_elem(p, SZ);
  return SZ == 2 ? (uint32_t) * (const uint16_t*)p : *(const uint32_t*)p;
}

template <int SZ>
ZC_HD ZC_INLINE void fp8_st(uint8_t* p, uint32_t v) {
  if (((uintptr_t)p & (SZ - 1)) != 0) {
    store_elem(p, SZ, v);
  } else if (SZ == 2) {
    *(uint16_t*)p = (uint16_t)v;
  } else {
    *(uint32_t*)p = v;
  }
}

// ---------------------------------------------------------------- encode

// quant.Encode's fp8 blocks: scale, α and B codes each; a block whose
// elements or transform are not finite, or whose max|u| is below 2^-100,
// gets the exact mark, α 0 and zero codes (its bytes go to the exact part
// by quant_copy_cta).
template <int DT, int E>
ZC_HD void q_fp8_encode_blocks(const QuantParams& P) {
  constexpr int SZ = DT == DT_F32 ? 4 : 2;
  QFp8Smem& sm = *reinterpret_cast<QFp8Smem*>(smem());
  const Fp8Lane L = fp8_lane(P.log);
  const int64_t nb = q_blocks(P.numel, P.log);
  uint8_t* scales = P.main_out + kQHeaderLen;
  uint8_t* codes = scales + 8 * nb;
  const unsigned ln = lane();
  int k = 0;
  for (int64_t b0 = (int64_t)bid() * L.G; b0 < nb; b0 += (int64_t)nbid() * L.G) {
    const int64_t b = b0 + L.sub;
    const int64_t lo = b * L.B;
    const int64_t n = b < nb ? (P.numel - lo < L.B ? P.numel - lo : L.B) : 0;
    float u[E];
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      const int64_t i = L.j + (int64_t)e * kThreads;
      u[e] = i < n ? widen(DT, fp8_ld<SZ>(P.src + (lo + i) * SZ)) : 0.0f;  // the padding is zeros
    }
    const float S = fp8_sumsq<E>(u, L, sm);
    fp8_fwht<E>(u, L, sm, k);
    const uint32_t M = fp8_absmax<E>(u, L, sm);
    // not finite: a NaN or Inf element (every u_i then is one) or overflow
    const bool exact = M >= 0x7F800000u || (M != 0 && M < kFp8TinyBits);
    const bool coded = !exact && M != 0;
    const float m = as_float(M);
    const float inv = coded ? fdiv_rn(kFp8Max, m) : 0.0f;
    uint32_t w[E];
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      // four lanes' codes into one word, element 4k's in the low byte
      uint32_t c = coded ? fp8_code(fmul_rn(u[e], inv)) << (8 * (ln & 3u)) : 0u;
      c |= shfl_xor(c, 1);
      c |= shfl_xor(c, 2);
      w[e] = c;
    }
    if (b >= nb) continue;
    if ((ln & 3u) == 0) {
ZC_UNROLL
      for (int e = 0; e < E; e++) st32g(codes + lo + L.j + (int64_t)e * kThreads, w[e]);
    }
    if (L.j == 0) {
      st32g(scales + 8 * b, exact ? kQExact : (coded ? as_u32(fdiv_rn(m, kFp8Max)) : 0u));
      st32g(scales + 8 * b + 4, exact ? 0u : as_u32(fp8_alpha(S, n)));
    }
  }
}

ZC_HD inline void q_fp8_encode(const QuantParams& P) {
  const int E = P.log <= 8 ? 1 : 1 << (P.log - 8);
  switch (P.dtype * 8 + E) {
    case DT_BF16 * 8 + 1: q_fp8_encode_blocks<DT_BF16, 1>(P); break;
    case DT_BF16 * 8 + 2: q_fp8_encode_blocks<DT_BF16, 2>(P); break;
    case DT_BF16 * 8 + 4: q_fp8_encode_blocks<DT_BF16, 4>(P); break;
    case DT_F16 * 8 + 1: q_fp8_encode_blocks<DT_F16, 1>(P); break;
    case DT_F16 * 8 + 2: q_fp8_encode_blocks<DT_F16, 2>(P); break;
    case DT_F16 * 8 + 4: q_fp8_encode_blocks<DT_F16, 4>(P); break;
    case DT_F32 * 8 + 1: q_fp8_encode_blocks<DT_F32, 1>(P); break;
    case DT_F32 * 8 + 2: q_fp8_encode_blocks<DT_F32, 2>(P); break;
    default: q_fp8_encode_blocks<DT_F32, 4>(P); break;
  }
}

// ---------------------------------------------------------------- decode and accumulate

// quant.Decode (ACC false: x' rounded to OUT) and quant.Accumulate (ACC
// true, OUT float32: acc + x', or x' with first) of fp8 blocks: v = H(E4M3
// values of the B codes), x'_i = v_i * (s / B) for the block's elements; an
// exact block's raw elements copied, narrowed or added. The codes of every
// block that is not exact are checked (quant's validCodes: no E4M3 NaN).
template <int OUT, int E, bool ACC>
ZC_HD void q_fp8_decode_blocks(const QuantParams& P, const QHeader& h) {
  constexpr int OSZ = OUT == DT_F32 ? 4 : 2;
  QFp8Smem& sm = *reinterpret_cast<QFp8Smem*>(smem());
  // the scan's verdict, or another CTA's, for the whole CTA: its barriers
  // need every thread
  if (tid() == 0) sm.failed = *(volatile uint32_t*)&P.status->code;
  sync();
  if (sm.failed != 0) return;
  const Fp8Lane L = fp8_lane(h.log);
  const int MDT = h.dtype, MSZ = q_elem_size(MDT);
  const bool first = P.first != 0;
  const int64_t nb = q_blocks(h.numel, h.log);
  const uint8_t* scales = P.main_in + kQHeaderLen;
  const uint8_t* codes = scales + 8 * nb;
  int k = 0;
  for (int64_t b0 = (int64_t)bid() * L.G; b0 < nb; b0 += (int64_t)nbid() * L.G) {
    const int64_t b = b0 + L.sub;
    const int64_t lo = b * L.B;
    const int64_t n = b < nb ? (h.numel - lo < L.B ? h.numel - lo : L.B) : 0;
    const uint32_t sbits = b < nb ? ld32g(scales + 8 * b) : 0u;
    const bool exact = b < nb && sbits == kQExact;
    const bool coded = b < nb && !exact && sbits <= q_max_scale(QMODE_FP8);  // else reported by the scan
    float v[E];
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      const uint32_t c = coded ? codes[lo + L.j + (int64_t)e * kThreads] : 0u;
      if ((c & 0x7Fu) == 0x7Fu) report_error(P.status, E_CORRUPT, 0, b, D_Q_CODE);
      v[e] = fp8_value(c);
    }
    fp8_fwht<E>(v, L, sm, k);
    uint8_t* out = P.dst + lo * OSZ;
    if (exact) {  // the warp's lanes all take this branch (one block per warp)
      const int64_t off = (int64_t)q_rank(P.gprefix, scales, 8, nb, b) * L.B * MSZ;
      if (off + n * MSZ > P.exact_len) continue;  // the scan reported it; nothing past the part is read
      const uint8_t* raw = P.exact_in + off;
ZC_UNROLL
      for (int e = 0; e < E; e++) {
        const int64_t i = L.j + (int64_t)e * kThreads;
        if (i >= n) continue;
        const uint32_t x = MSZ == 4 ? fp8_ld<4>(raw + i * 4) : fp8_ld<2>(raw + i * 2);
        if (ACC) {
          const float a = widen(MDT, x);
          fp8_st<4>(out + i * 4, first ? as_u32(a) : as_u32(q_add(as_float(fp8_ld<4>(out + i * 4)), a)));
        } else {
          fp8_st<OSZ>(out + i * OSZ, MDT == OUT ? x : narrow(OUT, as_float(x)));  // a float32 message: reduce.Narrow
        }
      }
      continue;
    }
    if (!coded) continue;
    const float kb = fdiv_rn(as_float(sbits), (float)L.B);  // exact for the scales quant writes
ZC_UNROLL
    for (int e = 0; e < E; e++) {
      const int64_t i = L.j + (int64_t)e * kThreads;
      if (i >= n) continue;
      const float x = fmul_rn(v[e], kb);
      if (ACC) {
        fp8_st<4>(out + i * 4, first ? as_u32(x) : as_u32(q_add(as_float(fp8_ld<4>(out + i * 4)), x)));
      } else {
        fp8_st<OSZ>(out + i * OSZ, narrow(OUT, x));
      }
    }
  }
}

template <int OUT, bool ACC>
ZC_HD ZC_INLINE void q_fp8_decode_e(const QuantParams& P, const QHeader& h) {
  if (h.log <= 8) {
    q_fp8_decode_blocks<OUT, 1, ACC>(P, h);
  } else if (h.log == 9) {
    q_fp8_decode_blocks<OUT, 2, ACC>(P, h);
  } else {
    q_fp8_decode_blocks<OUT, 4, ACC>(P, h);
  }
}

ZC_HD inline void q_fp8_decode(const QuantParams& P, const QHeader& h) {
  switch (P.dtype) {
    case DT_BF16: q_fp8_decode_e<DT_BF16, false>(P, h); break;
    case DT_F16: q_fp8_decode_e<DT_F16, false>(P, h); break;
    default: q_fp8_decode_e<DT_F32, false>(P, h); break;
  }
}

ZC_HD inline void q_fp8_accum(const QuantParams& P, const QHeader& h) { q_fp8_decode_e<DT_F32, true>(P, h); }

}  // namespace zc
