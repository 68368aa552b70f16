// zc_api.cpp: the C API of zipccl_cuda.h over a zc_backend (the CUDA runtime
// in libzipccl_cuda.so, the CPU emulator in tests/cuda_emu). Host code only:
// argument checks, workspace layout, chunk tables, launches.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "zc_backend.h"

using zc::DecParams;
using zc::EncParams;

namespace {

thread_local std::string g_error;

constexpr int64_t kStatusBytes = 128;  // DevStatus at the start of every workspace

int64_t a128(int64_t n) { return (n + 127) / 128 * 128; }

bool dtype_ok(int dtype) { return zc::coded_dtype(dtype); }

bool numel_ok(int64_t n) { return n >= 0 && n <= zc::kMaxNumel; }

zccl_status fail(zccl_status st, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_error = buf;
  return st;
}

zccl_status backend_fail() { return ZCCL_ERR_CUDA; }  // message already set

int64_t units_of(int64_t numel) { return (numel + zc::kZip3Block - 1) / zc::kZip3Block; }
int64_t raw_units_of(int64_t numel) { return (numel + zc::kRawBlock - 1) / zc::kRawBlock; }

// Workspace of one launch batch: ticket, look-back states, fallback flags.
struct Batch {
  int first, count;   // chunks
  int64_t units;      // zip3 units of the batch
  int64_t raw_units;  // raw blocks (encode fallback)
  int64_t off;        // offset of the batch region in the workspace
  int64_t bytes;
};

std::vector<Batch> plan_batches(const int64_t* counts, int nchunks, int64_t states_per_unit, bool flags) {
  std::vector<Batch> out;
  int64_t off = kStatusBytes;
  for (int first = 0; first < nchunks || (first == 0 && nchunks == 0); first += zc::kMaxChunks) {
    Batch b;
    b.first = first;
    b.count = std::min(zc::kMaxChunks, nchunks - first);
    b.units = 0;
    b.raw_units = 0;
    for (int c = first; c < first + b.count; c++) {
      b.units += units_of(counts[c]);
      b.raw_units += raw_units_of(counts[c]);
    }
    b.off = off;
    b.bytes = 128 + a128(b.units * states_per_unit * 8) + (flags ? a128(4 * (int64_t)b.count) : 0);
    off += b.bytes;
    out.push_back(b);
    if (nchunks == 0) break;
  }
  return out;
}

int64_t ws_total(const std::vector<Batch>& bs) {
  int64_t t = kStatusBytes;
  for (const Batch& b : bs) t += b.bytes;
  return t;
}

zccl_status check_counts(int dtype, const int64_t* counts, int nchunks) {
  if (!dtype_ok(dtype)) return fail(ZCCL_ERR_UNSUPPORTED, "dtype %d is not coded on the GPU", dtype);
  if (nchunks < 0 || (nchunks > 0 && counts == nullptr)) return fail(ZCCL_ERR_INVALID, "bad chunk list");
  for (int c = 0; c < nchunks; c++)
    if (!numel_ok(counts[c])) return fail(ZCCL_ERR_INVALID, "chunk %d: bad element count %lld", c, (long long)counts[c]);
  return ZCCL_OK;
}

int grid_for(int64_t units, int sm, int per_sm) {
  int64_t cap = (int64_t)std::max(1, sm) * std::max(1, per_sm);
  return (int)std::max<int64_t>(1, std::min<int64_t>(units, cap));
}

const char* detail_text(int d) {
  switch (d) {
    case zc::D_HEADER: return "frame header";
    case zc::D_INDEX_RESERVED: return "reserved index bytes";
    case zc::D_COUNT: return "escape count does not fit the block or the dynamic part";
    case zc::D_WINDOW: return "invalid window";
    case zc::D_DYN_RANGE: return "dynamic part range";
    case zc::D_PADDING: return "non-zero padding";
    case zc::D_ESC_OVERRUN: return "more escapes than recorded";
    case zc::D_ESC_VALUE: return "escape holds a representable or out-of-range exponent";
    case zc::D_ESC_COUNT: return "planes mark a different number of escapes than the index";
    case zc::D_CRC: return "block CRC-32C mismatch";
    case zc::D_DYN_LEN: return "dynamic part is not exactly the escapes plus padding";
    case zc::D_INDEX_PAD: return "index padding";
    case zc::D_Q_HEADER: return "lossy message header, or its element count or dtype differs from the request";
    case zc::D_Q_SCALE: return "lossy block scale is negative, not finite or too large";
    case zc::D_Q_CODE: return "lossy code -128 (int8), -8 (int4) or an E4M3 NaN (fp8)";
    case zc::D_Q_ALPHA: return "fp8 block alpha is negative or not finite";
    case zc::D_Q_PADDING: return "non-zero int4 padding nibble";
    case zc::D_Q_EXACT: return "exact part length or exact block count disagrees with the main part";
    case zc::D_Q_EXACT_CAP: return "exact part longer than its buffer (its length was written)";
  }
  return "";
}

zccl_status finish(zccl_ctx* ctx, void* ws, zccl_stream_t stream, unsigned flags);

}  // namespace

struct zccl_ctx {
  int device;
  zc_backend::DeviceInfo info;
  zc::CrcConsts* crc;  // device memory
};

void zc_backend::set_error(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_error = buf;
}

extern "C" {

int zccl_abi_version(void) { return ZCCL_ABI_VERSION; }

const char* zccl_build_info(void) { return zc_backend::build_info(); }

const char* zccl_status_string(int s) {
  switch (s) {
    case ZCCL_OK: return "ok";
    case ZCCL_ERR_INVALID: return "invalid argument";
    case ZCCL_ERR_CUDA: return "CUDA error";
    case ZCCL_ERR_UNSUPPORTED: return "unsupported";
    case ZCCL_ERR_CORRUPT: return "corrupt data";
    case ZCCL_ERR_TRUNCATED: return "truncated data";
    case ZCCL_ERR_CHECKSUM: return "checksum mismatch";
    case ZCCL_ERR_VERSION: return "unsupported version";
    case ZCCL_ERR_SIZE: return "size mismatch";
    case ZCCL_ERR_DTYPE: return "dtype mismatch";
    case ZCCL_ERR_KIND: return "invalid kind";
    case ZCCL_ERR_NOMEM: return "workspace too small";
  }
  return "unknown status";
}

const char* zccl_last_error(void) { return g_error.c_str(); }

int zccl_device_count(void) { return zc_backend::device_count(); }

zccl_status zccl_ctx_create(int device, zccl_ctx** out) {
  if (out == nullptr) return fail(ZCCL_ERR_INVALID, "out is NULL");
  *out = nullptr;
  zccl_ctx* c = new zccl_ctx;
  c->device = device;
  c->crc = nullptr;
  if (zc_backend::device_info(device, &c->info) != 0) {
    delete c;
    return backend_fail();
  }
  std::vector<zc::CrcConsts> h(1);
  zc::crc_consts_fill(&h[0]);
  void* d = nullptr;
  if (zc_backend::dev_malloc(&d, sizeof(zc::CrcConsts)) != 0 ||
      zc_backend::memcpy_sync(d, &h[0], sizeof(zc::CrcConsts), 1, nullptr) != 0) {
    if (d != nullptr) zc_backend::dev_free(d);
    delete c;
    return backend_fail();
  }
  c->crc = (zc::CrcConsts*)d;
  *out = c;
  return ZCCL_OK;
}

void zccl_ctx_destroy(zccl_ctx* ctx) {
  if (ctx == nullptr) return;
  if (ctx->crc != nullptr && zc_backend::set_device(ctx->device) == 0) zc_backend::dev_free(ctx->crc);
  delete ctx;
}

int64_t zccl_zip3_static_len(int dtype, int64_t numel) {
  if (!dtype_ok(dtype) || !numel_ok(numel)) return -1;
  return zc::plan_of(zc::fmt_of(dtype), zc::KIND_ZIP3, numel).static_len;
}

int64_t zccl_zip3_max_dynamic_len(int dtype, int64_t numel) {
  if (!dtype_ok(dtype) || !numel_ok(numel)) return -1;
  return a128(numel);
}

int64_t zccl_raw_frame_len(int dtype, int64_t numel) {
  if (!dtype_ok(dtype) || !numel_ok(numel)) return -1;
  return zc::raw_frame_len(zc::fmt_of(dtype), numel);
}

int64_t zccl_max_frame_len(int dtype, int64_t numel) {
  if (!dtype_ok(dtype) || !numel_ok(numel)) return -1;
  int64_t z = zc::kHeaderLen + zccl_zip3_static_len(dtype, numel) + a128(numel);
  return std::max(z, zccl_raw_frame_len(dtype, numel));
}

zccl_status zccl_frame_slots(int dtype, const int64_t* counts, int nchunks, int64_t* offsets) {
  zccl_status st = check_counts(dtype, counts, nchunks);
  if (st != ZCCL_OK) return st;
  if (offsets == nullptr) return fail(ZCCL_ERR_INVALID, "offsets is NULL");
  int64_t off = 0;
  for (int c = 0; c < nchunks; c++) {
    offsets[c] = off;
    off += a128(zccl_max_frame_len(dtype, counts[c]));
  }
  offsets[nchunks] = off;
  return ZCCL_OK;
}

int64_t zccl_encode_workspace_size(int dtype, const int64_t* counts, int nchunks) {
  if (check_counts(dtype, counts, nchunks) != ZCCL_OK) return -1;
  return ws_total(plan_batches(counts, nchunks, 1, true));
}

int64_t zccl_decode_workspace_size(int dtype, const int64_t* counts, int nchunks) {
  if (check_counts(dtype, counts, nchunks) != ZCCL_OK) return -1;
  return ws_total(plan_batches(counts, nchunks, 1, false));
}

int64_t zccl_reduce_workspace_size(int dtype, int64_t numel, int nsrc) {
  if (!dtype_ok(dtype) || !numel_ok(numel) || nsrc < 1 || nsrc > ZCCL_MAX_SOURCES) return -1;
  return ws_total(plan_batches(&numel, 1, nsrc, false));
}

}  // extern "C"

namespace {

zccl_status check_ws(void* ws, int64_t ws_size, int64_t need) {
  if (ws == nullptr || ((uintptr_t)ws & 15) != 0)
    return fail(ZCCL_ERR_INVALID, "workspace must be a 16-byte aligned device pointer");
  if (ws_size < need)
    return fail(ZCCL_ERR_NOMEM, "workspace of %lld bytes, need %lld", (long long)ws_size, (long long)need);
  return ZCCL_OK;
}

zccl_status encode_common(zccl_ctx* ctx, int dtype, const void* src, const int64_t* counts, int nchunks,
                          bool split, uint8_t* out_a, const int64_t* off_a, uint8_t* out_b, const int64_t* off_b,
                          int64_t* d_lens, void* ws, int64_t ws_size, zccl_stream_t stream, unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  zccl_status st = check_counts(dtype, counts, nchunks);
  if (st != ZCCL_OK) return st;
  std::vector<Batch> bs = plan_batches(counts, nchunks, 1, true);
  if ((st = check_ws(ws, ws_size, ws_total(bs))) != ZCCL_OK) return st;
  if (nchunks > 0 && (out_a == nullptr || off_a == nullptr || d_lens == nullptr || (split && (out_b == nullptr || off_b == nullptr))))
    return fail(ZCCL_ERR_INVALID, "NULL output pointer or offsets");
  int64_t total = 0;
  for (int c = 0; c < nchunks; c++) total += counts[c];
  if (total > 0 && src == nullptr) return fail(ZCCL_ERR_INVALID, "src is NULL");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  const zc::Fmt f = zc::fmt_of(dtype);
  uint8_t* w = (uint8_t*)ws;
  if (zc_backend::memset_async(w, 0, (size_t)ws_total(bs), stream) != 0) return backend_fail();
  int64_t elem = 0;
  for (const Batch& b : bs) {
    if (b.count <= 0) break;
    EncParams p;
    memset(&p, 0, sizeof p);
    p.dtype = dtype;
    p.nchunks = b.count;
    p.split = split ? 1 : 0;
    p.unit0[0] = 0;
    p.runit0[0] = 0;
    for (int k = 0; k < b.count; k++) {
      int c = b.first + k;
      zc::EncChunk& ch = p.ch[k];
      ch.src = (const uint8_t*)src + elem * f.size;
      ch.numel = counts[c];
      elem += counts[c];
      if (split) {
        ch.hdr = nullptr;
        ch.st = out_a + off_a[c];
        ch.dyn = out_b + off_b[c];
      } else {
        ch.hdr = out_a + off_a[c];
        ch.st = ch.hdr + zc::kHeaderLen;
        ch.dyn = ch.st + zc::plan_of(f, zc::KIND_ZIP3, counts[c]).static_len;
      }
      p.unit0[k + 1] = p.unit0[k] + units_of(counts[c]);
      p.runit0[k + 1] = p.runit0[k] + raw_units_of(counts[c]);
    }
    p.out_lens = d_lens + b.first;
    p.crc = ctx->crc;
    p.ticket = (uint32_t*)(w + b.off);
    p.states = (uint64_t*)(w + b.off + 128);
    p.flags = (uint32_t*)(w + b.off + 128 + a128(b.units * 8));
    const int per_sm = ctx->info.enc_ctas_per_sm[dtype];
    if (b.units > 0) {
      int grid = grid_for(b.units, ctx->info.sm_count, per_sm);
      if (zc_backend::launch_encode(dtype, p, grid, stream) != 0) return backend_fail();
    }
    bool empty = false;
    for (int k = 0; k < b.count; k++) empty = empty || counts[b.first + k] == 0;
    if (!split || empty) {
      int grid = grid_for(b.raw_units, ctx->info.sm_count, per_sm);
      if (zc_backend::launch_fallback(dtype, p, grid, stream) != 0) return backend_fail();
    }
  }
  return finish(ctx, ws, stream, flags);
}

zccl_status decode_common(zccl_ctx* ctx, int dtype, int nchunks, const int64_t* counts, int nsrc, int op,
                          const zccl_source* srcs_in, uint8_t* dst, void* ws, int64_t ws_size, zccl_stream_t stream,
                          unsigned flags) {
  // decode: nsrc == 1 and srcs_in has nchunks entries; reduce: nchunks == 1.
  const zc::Fmt f = zc::fmt_of(dtype);
  std::vector<Batch> bs = plan_batches(counts, nchunks, nsrc, false);
  zccl_status st = check_ws(ws, ws_size, ws_total(bs));
  if (st != ZCCL_OK) return st;
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  uint8_t* w = (uint8_t*)ws;
  if (zc_backend::memset_async(w, 0, (size_t)ws_total(bs), stream) != 0) return backend_fail();
  int64_t elem = 0;
  for (const Batch& b : bs) {
    if (b.count <= 0) break;
    DecParams p;
    memset(&p, 0, sizeof p);
    p.dtype = dtype;
    p.nchunks = b.count;
    p.nsrc = nsrc;
    p.op = op;
    p.chunk_base = b.first;
    p.unit0[0] = 0;
    for (int k = 0; k < b.count; k++) {
      int c = b.first + k;
      p.numel[k] = counts[c];
      p.dst[k] = dst + elem * f.size;
      elem += counts[c];
      p.unit0[k + 1] = p.unit0[k] + units_of(counts[c]);
    }
    int ns = nsrc > 1 ? nsrc : b.count;
    for (int k = 0; k < ns; k++) {
      const zccl_source& s = srcs_in[nsrc > 1 ? k : b.first + k];
      p.src[k].a = (const uint8_t*)s.a;
      p.src[k].b = (const uint8_t*)s.b;
      p.src[k].len = s.len;
      p.src[k].kind = s.kind;
    }
    p.status = (zc::DevStatus*)w;
    p.crc = ctx->crc;
    p.ticket = (uint32_t*)(w + b.off);
    p.states = (uint64_t*)(w + b.off + 128);
    size_t smem = zc::dec_smem_bytes(nsrc);
    int per_sm = zc_backend::dec_ctas_per_sm(dtype, smem, nsrc > 1);
    if (per_sm < 0) return backend_fail();
    int grid = grid_for(b.units, ctx->info.sm_count, per_sm);
    if (zc_backend::launch_decode(dtype, p, grid, smem, stream) != 0) return backend_fail();
  }
  return finish(ctx, ws, stream, flags);
}

zccl_status finish(zccl_ctx* ctx, void* ws, zccl_stream_t stream, unsigned flags) {
  if (flags & ZCCL_FLAG_SYNC) return zccl_workspace_status(ctx, ws, stream, nullptr, 0);
  return ZCCL_OK;
}

}  // namespace

extern "C" {

zccl_status zccl_encode_frames(zccl_ctx* ctx, int dtype, const void* src, const int64_t* counts, int nchunks,
                               void* out, const int64_t* out_offsets, int64_t* d_frame_lens, void* ws,
                               int64_t ws_size, zccl_stream_t stream, unsigned flags) {
  return encode_common(ctx, dtype, src, counts, nchunks, false, (uint8_t*)out, out_offsets, nullptr, nullptr,
                       d_frame_lens, ws, ws_size, stream, flags);
}

zccl_status zccl_encode_split(zccl_ctx* ctx, int dtype, const void* src, const int64_t* counts, int nchunks,
                              void* static_out, const int64_t* static_offsets, void* dyn_out,
                              const int64_t* dyn_offsets, int64_t* d_dyn_lens, void* ws, int64_t ws_size,
                              zccl_stream_t stream, unsigned flags) {
  return encode_common(ctx, dtype, src, counts, nchunks, true, (uint8_t*)static_out, static_offsets,
                       (uint8_t*)dyn_out, dyn_offsets, d_dyn_lens, ws, ws_size, stream, flags);
}

zccl_status zccl_decode_frames(zccl_ctx* ctx, int dtype, const void* in, const int64_t* in_offsets,
                               const int64_t* in_caps, const int64_t* counts, int nchunks, void* dst, void* ws,
                               int64_t ws_size, zccl_stream_t stream, unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  zccl_status st = check_counts(dtype, counts, nchunks);
  if (st != ZCCL_OK) return st;
  if (nchunks > 0 && (in == nullptr || in_offsets == nullptr || in_caps == nullptr))
    return fail(ZCCL_ERR_INVALID, "NULL input");
  int64_t total = 0;
  for (int c = 0; c < nchunks; c++) total += counts[c];
  if (total > 0 && dst == nullptr) return fail(ZCCL_ERR_INVALID, "dst is NULL");
  std::vector<zccl_source> srcs((size_t)nchunks);
  for (int c = 0; c < nchunks; c++) {
    if (in_caps[c] < 0) return fail(ZCCL_ERR_INVALID, "chunk %d: negative capacity", c);
    srcs[c] = zccl_source{ZCCL_SRC_FRAME, (const uint8_t*)in + in_offsets[c], nullptr, in_caps[c]};
  }
  return decode_common(ctx, dtype, nchunks, counts, 1, 0, srcs.data(), (uint8_t*)dst, ws, ws_size, stream, flags);
}

zccl_status zccl_decode_split(zccl_ctx* ctx, int dtype, int kind, const void* static_in,
                              const int64_t* static_offsets, const void* dyn_in, const int64_t* dyn_offsets,
                              const int64_t* dyn_lens, const int64_t* counts, int nchunks, void* dst, void* ws,
                              int64_t ws_size, zccl_stream_t stream, unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  zccl_status st = check_counts(dtype, counts, nchunks);
  if (st != ZCCL_OK) return st;
  if (kind != ZCCL_KIND_ZIP3 && kind != ZCCL_KIND_RAW)
    return fail(kind == ZCCL_KIND_HUFF ? ZCCL_ERR_UNSUPPORTED : ZCCL_ERR_KIND, "kind %d cannot be decoded on the GPU", kind);
  if (nchunks > 0 && (static_in == nullptr || static_offsets == nullptr ||
                      (kind == ZCCL_KIND_ZIP3 && (dyn_in == nullptr || dyn_offsets == nullptr || dyn_lens == nullptr))))
    return fail(ZCCL_ERR_INVALID, "NULL input");
  std::vector<zccl_source> srcs((size_t)nchunks);
  for (int c = 0; c < nchunks; c++) {
    if (kind == ZCCL_KIND_ZIP3) {
      srcs[c] = zccl_source{ZCCL_SRC_SPLIT_ZIP3, (const uint8_t*)static_in + static_offsets[c],
                            (const uint8_t*)dyn_in + dyn_offsets[c], dyn_lens[c]};
    } else {
      srcs[c] = zccl_source{ZCCL_SRC_SPLIT_RAW, (const uint8_t*)static_in + static_offsets[c], nullptr, 0};
    }
  }
  return decode_common(ctx, dtype, nchunks, counts, 1, 0, srcs.data(), (uint8_t*)dst, ws, ws_size, stream, flags);
}

zccl_status zccl_decode_reduce(zccl_ctx* ctx, int dtype, int op, const zccl_source* srcs, int nsrc,
                               int64_t numel, void* dst, void* ws, int64_t ws_size, zccl_stream_t stream,
                               unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (!dtype_ok(dtype)) return fail(ZCCL_ERR_UNSUPPORTED, "dtype %d is not coded on the GPU", dtype);
  if (op != ZCCL_OP_SUM && op != ZCCL_OP_PRODUCT)
    return fail(ZCCL_ERR_UNSUPPORTED, "reduce op %d (only SUM and PRODUCT are fused on the GPU)", op);
  if (nsrc < 1 || nsrc > ZCCL_MAX_SOURCES || srcs == nullptr)
    return fail(ZCCL_ERR_INVALID, "nsrc %d (1..%d)", nsrc, ZCCL_MAX_SOURCES);
  if (!numel_ok(numel)) return fail(ZCCL_ERR_INVALID, "bad element count");
  if (numel > 0 && dst == nullptr) return fail(ZCCL_ERR_INVALID, "dst is NULL");
  for (int r = 0; r < nsrc; r++) {
    if (srcs[r].kind < ZCCL_SRC_FRAME || srcs[r].kind > ZCCL_SRC_PLAIN)
      return fail(ZCCL_ERR_INVALID, "source %d: kind %d", r, srcs[r].kind);
    if (srcs[r].a == nullptr && numel > 0) return fail(ZCCL_ERR_INVALID, "source %d is NULL", r);
  }
  return decode_common(ctx, dtype, 1, &numel, nsrc, op, srcs, (uint8_t*)dst, ws, ws_size, stream, flags);
}

int64_t zccl_quant_main_len(int mode, int64_t numel, int block) {
  if (!zc::q_mode_ok(mode)) return -1;
  const int lg = zc::q_block_log(mode, block);
  if (lg < 0 || !numel_ok(numel)) return -1;
  return zc::q_main_len(mode, numel, lg);
}

int64_t zccl_quant_workspace_size(int64_t numel) {
  if (!numel_ok(numel)) return -1;
  return zc::q_ws_size(numel);
}

}  // extern "C"

namespace {

// The quantization kernels run in sequence on one stream; p.op is set per
// launch. The workspace's status, ticket, totals and look-back states are
// cleared first (the group prefixes are written before they are read).
// blocks sizes the scan; units, the CTAs the coding kernels can use.
zccl_status quant_run(zccl_ctx* ctx, zc::QuantParams& p, const int* ops, int nops, int64_t blocks, int64_t units,
                      void* ws, int64_t ws_size, zccl_stream_t stream, unsigned flags) {
  zccl_status st = check_ws(ws, ws_size, zc::q_ws_size(p.numel));
  if (st != ZCCL_OK) return st;
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  uint8_t* w = (uint8_t*)ws;
  if (zc_backend::memset_async(w, 0, (size_t)zc::q_ws_prefix_off(p.numel), stream) != 0) return backend_fail();
  p.status = (zc::DevStatus*)w;
  p.ticket = (uint32_t*)(w + kStatusBytes);
  p.qtotal = (uint64_t*)(w + kStatusBytes + 8);
  p.states = (uint64_t*)(w + zc::kQWsStates);
  p.gprefix = (uint64_t*)(w + zc::q_ws_prefix_off(p.numel));
  const int64_t tiles = (((blocks + 31) / 32) + zc::kQTileGroups - 1) / zc::kQTileGroups;
  for (int k = 0; k < nops; k++) {
    p.op = ops[k];
    const bool scan = p.op == zc::QOP_SCAN_ENC || p.op == zc::QOP_SCAN_DEC;
    // the scan: one tile per CTA
    const int grid = grid_for(scan ? std::max<int64_t>(1, tiles) : units, ctx->info.sm_count,
                              ctx->info.quant_ctas_per_sm[p.op]);
    if (zc_backend::launch_quant(p, grid, stream) != 0) return backend_fail();
  }
  return finish(ctx, ws, stream, flags);
}

// A decoder's grid: the mode and block size are the message's, on the
// device, so the scan is sized as for blocks of 2048 and the coding kernel
// for fp8's passes of 256 elements, the most CTAs any mode can use (int8
// and int4 take 8 blocks per CTA; the CTAs past their blocks leave).
int64_t decode_units(int64_t numel) { return (numel + zc::kThreads - 1) / zc::kThreads; }

zccl_status quant_check_message(zccl_ctx* ctx, const void* main_in, int64_t main_len, const void* exact_in,
                                int64_t exact_len, int64_t numel, const void* dst) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (main_len < 0 || (main_len > 0 && main_in == nullptr)) return fail(ZCCL_ERR_INVALID, "bad main part");
  if (exact_len < 0 || (exact_len > 0 && exact_in == nullptr)) return fail(ZCCL_ERR_INVALID, "bad exact part");
  if (!numel_ok(numel)) return fail(ZCCL_ERR_INVALID, "bad element count %lld", (long long)numel);
  if (numel > 0 && dst == nullptr) return fail(ZCCL_ERR_INVALID, "output is NULL");
  return ZCCL_OK;
}

}  // namespace

extern "C" {

zccl_status zccl_quant_encode(zccl_ctx* ctx, int dtype, int mode, int block, const void* src, int64_t numel,
                              void* main_out, void* exact_out, int64_t exact_cap, int64_t* d_exact_len, void* ws,
                              int64_t ws_size, zccl_stream_t stream, unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (!zc::q_dtype_ok(dtype))
    return fail(ZCCL_ERR_UNSUPPORTED, "dtype %d cannot be coded lossily (float32, bfloat16 and float16 can)", dtype);
  if (!zc::q_mode_ok(mode)) return fail(ZCCL_ERR_INVALID, "unknown lossy mode %d", mode);
  const int lg = zc::q_block_log(mode, block);
  if (lg < 0)
    return fail(ZCCL_ERR_INVALID, "block size %d: want a power of two from 32 to %d", block,
                1 << zc::q_max_log(mode));
  if (!numel_ok(numel)) return fail(ZCCL_ERR_INVALID, "bad element count %lld", (long long)numel);
  if ((numel > 0 && src == nullptr) || main_out == nullptr || d_exact_len == nullptr || exact_cap < 0 ||
      (exact_cap > 0 && exact_out == nullptr))
    return fail(ZCCL_ERR_INVALID, "NULL input or output");
  zc::QuantParams p;
  memset(&p, 0, sizeof p);
  p.dtype = dtype;
  p.mode = mode;
  p.log = lg;
  p.numel = numel;
  p.src = (const uint8_t*)src;
  p.main_out = (uint8_t*)main_out;
  p.main_in = (const uint8_t*)main_out;
  p.main_len = zc::q_main_len(mode, numel, lg);
  p.exact_out = (uint8_t*)exact_out;
  p.exact_len = exact_cap;
  p.exact_len_out = d_exact_len;
  const int64_t blocks = zc::q_blocks(numel, lg);
  // int8 and int4: 8 blocks (one per warp) per CTA; fp8: a CTA pass over
  // 256 elements, whole blocks (the copy's CTAs leave at once but for exact
  // blocks)
  const int64_t per_cta = mode == zc::QMODE_FP8 ? std::max(1, zc::kThreads >> lg) : zc::kWarps;
  const int64_t units = (blocks + per_cta - 1) / per_cta;
  // the scan writes the header, so it runs for an empty tensor too
  static const int all[] = {zc::QOP_ENCODE, zc::QOP_SCAN_ENC, zc::QOP_COPY};
  static const int empty[] = {zc::QOP_SCAN_ENC};
  return blocks > 0 ? quant_run(ctx, p, all, 3, blocks, units, ws, ws_size, stream, flags)
                    : quant_run(ctx, p, empty, 1, blocks, units, ws, ws_size, stream, flags);
}

zccl_status zccl_quant_decode(zccl_ctx* ctx, const void* main_in, int64_t main_len, const void* exact_in,
                              int64_t exact_len, int dtype, int64_t numel, void* dst, void* ws, int64_t ws_size,
                              zccl_stream_t stream, unsigned flags) {
  zccl_status st = quant_check_message(ctx, main_in, main_len, exact_in, exact_len, numel, dst);
  if (st != ZCCL_OK) return st;
  if (!zc::q_dtype_ok(dtype))
    return fail(ZCCL_ERR_UNSUPPORTED, "dtype %d: lossy messages decode into float32, bfloat16 or float16", dtype);
  zc::QuantParams p;
  memset(&p, 0, sizeof p);
  p.dtype = dtype;
  p.numel = numel;
  p.main_in = (const uint8_t*)main_in;
  p.main_len = main_len;
  p.exact_in = (const uint8_t*)exact_in;
  p.exact_len = exact_len;
  p.dst = (uint8_t*)dst;
  static const int ops[] = {zc::QOP_SCAN_DEC, zc::QOP_DECODE};
  return quant_run(ctx, p, ops, 2, (numel + 2047) / 2048, decode_units(numel), ws, ws_size, stream, flags);
}

zccl_status zccl_quant_accumulate(zccl_ctx* ctx, const void* main_in, int64_t main_len, const void* exact_in,
                                  int64_t exact_len, int64_t numel, float* acc, int first, void* ws, int64_t ws_size,
                                  zccl_stream_t stream, unsigned flags) {
  zccl_status st = quant_check_message(ctx, main_in, main_len, exact_in, exact_len, numel, acc);
  if (st != ZCCL_OK) return st;
  zc::QuantParams p;
  memset(&p, 0, sizeof p);
  p.dtype = 0;  // any message dtype
  p.first = first != 0 ? 1 : 0;
  p.numel = numel;
  p.main_in = (const uint8_t*)main_in;
  p.main_len = main_len;
  p.exact_in = (const uint8_t*)exact_in;
  p.exact_len = exact_len;
  p.dst = (uint8_t*)acc;
  static const int ops[] = {zc::QOP_SCAN_DEC, zc::QOP_ACCUM};
  return quant_run(ctx, p, ops, 2, (numel + 2047) / 2048, decode_units(numel), ws, ws_size, stream, flags);
}

// The elementwise steps: one launch, no workspace.
static zccl_status quant_elementwise(zccl_ctx* ctx, zc::QuantParams& p, zccl_stream_t stream, unsigned flags) {
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  if (p.numel == 0) return ZCCL_OK;
  const int grid = grid_for((p.numel + zc::kThreads - 1) / zc::kThreads, ctx->info.sm_count,
                            ctx->info.quant_ctas_per_sm[p.op]);
  if (zc_backend::launch_quant(p, grid, stream) != 0) return backend_fail();
  if ((flags & ZCCL_FLAG_SYNC) && zc_backend::stream_sync(stream) != 0) return backend_fail();
  return ZCCL_OK;
}

zccl_status zccl_quant_add_exact(zccl_ctx* ctx, int dtype, const void* src, int64_t numel, float* acc, int first,
                                 zccl_stream_t stream, unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (!zc::q_dtype_ok(dtype)) return fail(ZCCL_ERR_UNSUPPORTED, "dtype %d: float32, bfloat16 or float16", dtype);
  if (!numel_ok(numel) || (numel > 0 && (src == nullptr || acc == nullptr)))
    return fail(ZCCL_ERR_INVALID, "bad element count or NULL buffer");
  zc::QuantParams p;
  memset(&p, 0, sizeof p);
  p.op = zc::QOP_ADD_EXACT;
  p.dtype = dtype;
  p.first = first != 0 ? 1 : 0;
  p.numel = numel;
  p.src = (const uint8_t*)src;
  p.dst = (uint8_t*)acc;
  return quant_elementwise(ctx, p, stream, flags);
}

zccl_status zccl_quant_finish(zccl_ctx* ctx, const float* acc, int64_t numel, int divisor, int dtype, void* dst,
                              zccl_stream_t stream, unsigned flags) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (!zc::q_dtype_ok(dtype)) return fail(ZCCL_ERR_UNSUPPORTED, "dtype %d: float32, bfloat16 or float16", dtype);
  if (divisor < 1) return fail(ZCCL_ERR_INVALID, "divisor %d: want 1 or more", divisor);
  if (!numel_ok(numel) || (numel > 0 && (acc == nullptr || dst == nullptr)))
    return fail(ZCCL_ERR_INVALID, "bad element count or NULL buffer");
  zc::QuantParams p;
  memset(&p, 0, sizeof p);
  p.op = zc::QOP_FINISH;
  p.dtype = dtype;
  p.div = divisor;
  p.numel = numel;
  p.src = (const uint8_t*)acc;
  p.dst = (uint8_t*)dst;
  return quant_elementwise(ctx, p, stream, flags);
}

zccl_status zccl_workspace_status(zccl_ctx* ctx, const void* ws, zccl_stream_t stream, char* msg, size_t msg_len) {
  if (ctx == nullptr || ws == nullptr) return fail(ZCCL_ERR_INVALID, "NULL ctx or workspace");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  if (zc_backend::stream_sync(stream) != 0) return backend_fail();
  zc::DevStatus s;
  if (zc_backend::memcpy_sync(&s, ws, sizeof s, 2, stream) != 0) return backend_fail();
  char buf[256];
  if (s.code == 0) {
    snprintf(buf, sizeof buf, "ok");
  } else {
    snprintf(buf, sizeof buf, "%s: chunk %d, block %lld: %s", zccl_status_string((int)s.code), s.chunk,
             (long long)s.block, detail_text(s.detail));
    g_error = buf;
  }
  if (msg != nullptr && msg_len > 0) {
    strncpy(msg, buf, msg_len - 1);
    msg[msg_len - 1] = 0;
  }
  return (zccl_status)s.code;
}

zccl_status zccl_malloc(zccl_ctx* ctx, void** p, int64_t bytes) {
  if (ctx == nullptr || p == nullptr || bytes < 0) return fail(ZCCL_ERR_INVALID, "bad malloc arguments");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::dev_malloc(p, (size_t)(bytes > 0 ? bytes : 1)) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_free(zccl_ctx* ctx, void* p) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  return zc_backend::dev_free(p) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_memcpy(zccl_ctx* ctx, void* dst, const void* src, int64_t bytes, int kind) {
  if (ctx == nullptr || bytes < 0 || kind < 1 || kind > 3) return fail(ZCCL_ERR_INVALID, "bad memcpy arguments");
  if (bytes == 0) return ZCCL_OK;
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::memcpy_sync(dst, src, (size_t)bytes, kind, nullptr) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_memset(zccl_ctx* ctx, void* p, int value, int64_t bytes) {
  if (ctx == nullptr || bytes < 0) return fail(ZCCL_ERR_INVALID, "bad memset arguments");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  if (zc_backend::memset_async(p, value, (size_t)bytes, nullptr) != 0) return backend_fail();
  return zc_backend::stream_sync(nullptr) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_synchronize(zccl_ctx* ctx, zccl_stream_t stream) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::stream_sync(stream) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_stream_create(zccl_ctx* ctx, zccl_stream_t* out) {
  if (ctx == nullptr || out == nullptr) return fail(ZCCL_ERR_INVALID, "NULL ctx or stream");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::stream_create(out) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_stream_destroy(zccl_ctx* ctx, zccl_stream_t stream) {
  if (ctx == nullptr || stream == nullptr) return fail(ZCCL_ERR_INVALID, "NULL ctx or stream");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::stream_destroy(stream) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_host_alloc(zccl_ctx* ctx, void** p, int64_t bytes) {
  if (ctx == nullptr || p == nullptr || bytes < 0) return fail(ZCCL_ERR_INVALID, "bad host_alloc arguments");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::host_alloc(p, (size_t)(bytes > 0 ? bytes : 1)) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_host_free(zccl_ctx* ctx, void* p) {
  if (ctx == nullptr) return fail(ZCCL_ERR_INVALID, "ctx is NULL");
  if (p == nullptr) return ZCCL_OK;
  return zc_backend::host_free(p) == 0 ? ZCCL_OK : backend_fail();
}

zccl_status zccl_memcpy_async(zccl_ctx* ctx, void* dst, const void* src, int64_t bytes, int kind,
                              zccl_stream_t stream) {
  if (ctx == nullptr || bytes < 0 || kind < 1 || kind > 3) return fail(ZCCL_ERR_INVALID, "bad memcpy arguments");
  if (bytes == 0) return ZCCL_OK;
  if (dst == nullptr || src == nullptr) return fail(ZCCL_ERR_INVALID, "NULL memcpy pointer");
  if (zc_backend::set_device(ctx->device) != 0) return backend_fail();
  return zc_backend::memcpy_async(dst, src, (size_t)bytes, kind, stream) == 0 ? ZCCL_OK : backend_fail();
}

}  // extern "C"
