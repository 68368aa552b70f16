/*
 * zipccl_cuda.h: C API of libzipccl_cuda.so, zipccl's CUDA kernels for the
 * lossless codec (docs/FORMAT.md). Every byte the encoders write is identical
 * to what the Go codec (backend/codec) writes for the same input, and the
 * decoders accept exactly the frames the Go decoder accepts (zip3 and raw
 * frames; huff frames are reported as ZCCL_ERR_UNSUPPORTED). ABI 3 adds the
 * opt-in lossy quantization of backend/quant (docs/FORMAT.md 11), with the
 * same guarantees against package quant (zccl_quant_*, at the end).
 *
 * Plain C. The library is loaded at run time with dlopen by the Go engine
 * only when a GPU is present; nothing links against it at build time.
 *
 * Conventions
 *  - All data pointers are device pointers. Arrays of counts / offsets /
 *    lengths passed by the host are host pointers, except where a name
 *    starts with d_ (a device pointer the kernels write).
 *  - dtype uses backend/dtype's numbers: ZCCL_FLOAT32 = 1, ZCCL_BFLOAT16 = 3,
 *    ZCCL_FLOAT16 = 4, ZCCL_FLOAT8_E4M3FN = 11, ZCCL_FLOAT8_E5M2 = 12.
 *  - Every operation is asynchronous on the given stream (a cudaStream_t;
 *    NULL is the legacy default stream) and needs a workspace (device
 *    memory of at least the size the *_workspace_size function returns, not
 *    shared by operations in flight). A workspace can be reused by the next
 *    operation on the same stream.
 *  - Host-side problems (bad arguments, CUDA errors) are returned at once as
 *    a non-zero zccl_status; zccl_last_error() then has a message (per
 *    thread). Data problems found by the kernels (a corrupted frame, a
 *    checksum mismatch) are recorded in the workspace: read them with
 *    zccl_workspace_status() (it synchronizes the stream), or pass
 *    ZCCL_FLAG_SYNC to make the call wait and return that status.
 *  - One call processes at most ZCCL_MAX_CHUNKS chunks per kernel launch and
 *    splits larger requests into several launches on the same stream.
 */
#ifndef ZIPCCL_CUDA_H
#define ZIPCCL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZCCL_ABI_VERSION 3 /* 3: the lossy quantization entries (zccl_quant_*) */
#define ZCCL_MAX_CHUNKS 48  /* per launch (larger requests are split) */
#define ZCCL_MAX_SOURCES 48 /* per decode+reduce call */

/* The same type as cudaStream_t, without including cuda_runtime.h. */
typedef struct CUstream_st* zccl_stream_t;

typedef struct zccl_ctx zccl_ctx; /* opaque: one per device */

typedef enum {
  ZCCL_OK = 0,
  ZCCL_ERR_INVALID = 1,     /* bad argument */
  ZCCL_ERR_CUDA = 2,        /* a CUDA runtime call failed */
  ZCCL_ERR_UNSUPPORTED = 3, /* dtype / kind / op not handled on the GPU (e.g. huff frames) */
  ZCCL_ERR_CORRUPT = 4,     /* malformed frame (codec.ErrCorrupt) */
  ZCCL_ERR_TRUNCATED = 5,   /* frame longer than the bytes given (codec.ErrTruncated) */
  ZCCL_ERR_CHECKSUM = 6,    /* CRC-32C mismatch (codec.ErrChecksum) */
  ZCCL_ERR_VERSION = 7,     /* bad magic or version (codec.ErrVersion) */
  ZCCL_ERR_SIZE = 8,        /* element count differs from the request (codec.ErrSize) */
  ZCCL_ERR_DTYPE = 9,       /* frame dtype differs from the request (codec.ErrDType) */
  ZCCL_ERR_KIND = 10,
  ZCCL_ERR_NOMEM = 11       /* workspace too small */
} zccl_status;

enum { ZCCL_FLOAT32 = 1, ZCCL_BFLOAT16 = 3, ZCCL_FLOAT16 = 4, ZCCL_FLOAT8_E4M3FN = 11, ZCCL_FLOAT8_E5M2 = 12 };
enum { ZCCL_KIND_RAW = 0, ZCCL_KIND_ZIP3 = 1, ZCCL_KIND_HUFF = 2 };
enum { ZCCL_OP_SUM = 0, ZCCL_OP_PRODUCT = 2 }; /* backend/reduce values */

/* Flags. */
#define ZCCL_FLAG_SYNC 1u /* wait for the stream and return the kernels' status */

/* Library. */
int zccl_abi_version(void);
const char* zccl_build_info(void);         /* compiler, CUDA version, architectures */
const char* zccl_status_string(int status); /* "ok", "corrupt", ... */
const char* zccl_last_error(void);          /* message of this thread's last failure */
int zccl_device_count(void);                /* 0 when there is no usable GPU or driver */

/* Context: binds a device (cudaSetDevice is called on it by every
 * operation) and caches its properties. */
zccl_status zccl_ctx_create(int device, zccl_ctx** out);
void zccl_ctx_destroy(zccl_ctx* ctx);

/* Sizes (pure functions of the arguments; -1 for an invalid dtype or count). */
int64_t zccl_zip3_static_len(int dtype, int64_t numel);      /* static part of a zip3 frame */
int64_t zccl_zip3_max_dynamic_len(int dtype, int64_t numel); /* = roundup128(numel) */
int64_t zccl_raw_frame_len(int dtype, int64_t numel);
/* Largest frame zccl_encode_frames can write: 32 + static + max dynamic. */
int64_t zccl_max_frame_len(int dtype, int64_t numel);
/* Byte offsets of 128-aligned slots, one per chunk, each holding the
 * largest frame of its chunk (offsets has nchunks+1 entries; the last is
 * the total). The chunk-per-destination layout for all-to-all. */
zccl_status zccl_frame_slots(int dtype, const int64_t* counts, int nchunks, int64_t* offsets);

int64_t zccl_encode_workspace_size(int dtype, const int64_t* counts, int nchunks);
int64_t zccl_decode_workspace_size(int dtype, const int64_t* counts, int nchunks);
int64_t zccl_reduce_workspace_size(int dtype, int64_t numel, int nsrc);

/* Encode: src holds sum(counts) elements, cut into nchunks consecutive
 * chunks. Chunk c becomes one zip3 frame (or a raw frame when that is
 * smaller, exactly as codec.Encoder.Encode decides) at out + out_offsets[c];
 * its length is written to d_frame_lens[c] (device int64). Each slot must
 * hold zccl_max_frame_len(counts[c]) bytes. */
zccl_status zccl_encode_frames(zccl_ctx* ctx, int dtype, const void* src, const int64_t* counts, int nchunks,
                               void* out, const int64_t* out_offsets, int64_t* d_frame_lens, void* ws,
                               int64_t ws_size, zccl_stream_t stream, unsigned flags);

/* Split mode (codec.EncodeStatic / EncodeDynamic): chunk c's static part
 * (exactly zccl_zip3_static_len bytes) at static_out + static_offsets[c],
 * its dynamic part at dyn_out + dyn_offsets[c] (capacity
 * zccl_zip3_max_dynamic_len), its length in d_dyn_lens[c]. No raw fallback. */
zccl_status zccl_encode_split(zccl_ctx* ctx, int dtype, const void* src, const int64_t* counts, int nchunks,
                              void* static_out, const int64_t* static_offsets, void* dyn_out,
                              const int64_t* dyn_offsets, int64_t* d_dyn_lens, void* ws, int64_t ws_size,
                              zccl_stream_t stream, unsigned flags);

/* Decode nchunks frames (frame c at in + in_offsets[c], with in_caps[c]
 * bytes readable there) into dst, chunk c holding counts[c] elements after
 * the chunks before it. Frames may be zip3 or raw. */
zccl_status zccl_decode_frames(zccl_ctx* ctx, int dtype, const void* in, const int64_t* in_offsets,
                               const int64_t* in_caps, const int64_t* counts, int nchunks, void* dst, void* ws,
                               int64_t ws_size, zccl_stream_t stream, unsigned flags);

/* Decode split parts (kind ZCCL_KIND_ZIP3 or ZCCL_KIND_RAW). */
zccl_status zccl_decode_split(zccl_ctx* ctx, int dtype, int kind, const void* static_in,
                              const int64_t* static_offsets, const void* dyn_in, const int64_t* dyn_offsets,
                              const int64_t* dyn_lens, const int64_t* counts, int nchunks, void* dst, void* ws,
                              int64_t ws_size, zccl_stream_t stream, unsigned flags);

/* A contribution to zccl_decode_reduce. */
enum { ZCCL_SRC_FRAME = 0, ZCCL_SRC_SPLIT_ZIP3 = 1, ZCCL_SRC_SPLIT_RAW = 2, ZCCL_SRC_PLAIN = 3 };
typedef struct {
  int kind;        /* ZCCL_SRC_* */
  const void* a;   /* frame / static part / plain elements (device) */
  const void* b;   /* dynamic part (split zip3) */
  int64_t len;     /* frame: readable bytes; split zip3: dynamic length */
} zccl_source;

/* Fused decode + reduce: dst[i] = srcs[0][i] op srcs[1][i] op ... in rank
 * order 0..nsrc-1, as backend/zcoll's reduce-scatter fold: bfloat16,
 * float16 and float8 in float32 with one rounding at the end, float32 in
 * float32, x86's NaN rule; nsrc == 1 is a bit-exact copy. op is
 * ZCCL_OP_SUM or ZCCL_OP_PRODUCT. dst may not overlap a source. */
zccl_status zccl_decode_reduce(zccl_ctx* ctx, int dtype, int op, const zccl_source* srcs, int nsrc,
                               int64_t numel, void* dst, void* ws, int64_t ws_size, zccl_stream_t stream,
                               unsigned flags);

/* The kernels' status recorded in a workspace by the last operation that
 * used it. Synchronizes the stream. Returns ZCCL_OK or the error; when
 * msg is not NULL a description is written there. */
zccl_status zccl_workspace_status(zccl_ctx* ctx, const void* ws, zccl_stream_t stream, char* msg, size_t msg_len);

/* Helpers for tests and tools that have no CUDA runtime of their own. */
zccl_status zccl_malloc(zccl_ctx* ctx, void** p, int64_t bytes);
zccl_status zccl_free(zccl_ctx* ctx, void* p);
zccl_status zccl_memcpy(zccl_ctx* ctx, void* dst, const void* src, int64_t bytes, int kind); /* 1 h2d, 2 d2h, 3 d2d */
zccl_status zccl_memset(zccl_ctx* ctx, void* p, int value, int64_t bytes);
zccl_status zccl_synchronize(zccl_ctx* ctx, zccl_stream_t stream);

/* ABI 2: what an engine that moves coded frames through host memory (its
 * own transport) needs. Streams the library creates are non-blocking: they
 * never wait for the legacy default stream, nor it for them. Host memory
 * from zccl_host_alloc is page-locked, so copies to and from it are DMA and
 * asynchronous. zccl_memcpy_async (kind 1 h2d, 2 d2h, 3 d2d) returns once
 * the copy is queued on stream. */
zccl_status zccl_stream_create(zccl_ctx* ctx, zccl_stream_t* out);
zccl_status zccl_stream_destroy(zccl_ctx* ctx, zccl_stream_t stream);
zccl_status zccl_host_alloc(zccl_ctx* ctx, void** p, int64_t bytes);
zccl_status zccl_host_free(zccl_ctx* ctx, void* p);
zccl_status zccl_memcpy_async(zccl_ctx* ctx, void* dst, const void* src, int64_t bytes, int kind,
                              zccl_stream_t stream);

/* ABI 3: lossy quantization (backend/quant; docs/FORMAT.md 11, "Lossy
 * messages"). A message is a main part, whose length zccl_quant_main_len
 * gives from (mode, numel, block) alone, and an exact part: the raw bytes,
 * in block order, of the blocks that hold a NaN or an infinity (usually
 * none; fp8 also sends exact a block whose transform overflows or is
 * below 2^-100). Modes: blockwise int8 and int4, and fp8 (TACO: E4M3
 * codes of each block's Walsh-Hadamard transform, s and alpha per block;
 * added within ABI 3: an older library refuses mode 3 as an unknown mode,
 * and a message of it as corrupt). The encoder writes the bytes quant.Encode writes; the decoder and
 * the accumulator accept exactly the messages quant.Decode and
 * quant.Accumulate accept and give their results bit for bit (Go on
 * amd64). dtype: ZCCL_FLOAT32, ZCCL_BFLOAT16 or ZCCL_FLOAT16 (others are
 * ZCCL_ERR_UNSUPPORTED); block: a power of two from 32 to 65536, fp8 to
 * 1024 (the collectives use 2048 for int8, 256 for int4 and fp8). Every call takes a workspace of at least
 * zccl_quant_workspace_size(numel) bytes, which serves any block size.
 *
 * Problems with the message are recorded in the workspace (read them with
 * zccl_workspace_status, or pass ZCCL_FLAG_SYNC): ZCCL_ERR_CORRUPT for
 * what quant rejects as corrupt (bad magic, version, mode, dtype, block
 * size or reserved bytes, a main part of the wrong length, a negative or
 * non-finite or too large scale, a negative or non-finite fp8 alpha, the
 * code -128 / -8 or an E4M3 NaN code (0x7F, 0xFF), a non-zero int4
 * padding nibble, an exact part of the wrong length or an exact count that
 * disagrees with the scales), ZCCL_ERR_SIZE for a message of another
 * element count than numel, ZCCL_ERR_DTYPE for one that cannot be decoded
 * into dtype. The output of a rejected message is unspecified. */
enum { ZCCL_QUANT_INT8 = 1, ZCCL_QUANT_INT4 = 2, ZCCL_QUANT_FP8 = 3 };

/* quant.MainLen: -1 for a bad mode, block size or count. */
int64_t zccl_quant_main_len(int mode, int64_t numel, int block);
/* Workspace of any zccl_quant_* call on up to numel elements; -1 if bad. */
int64_t zccl_quant_workspace_size(int64_t numel);

/* Encode numel elements of dtype at src: the main part (exactly
 * zccl_quant_main_len bytes) at main_out, the exact part at exact_out
 * (capacity exact_cap bytes; numel x element size always suffices) and its
 * length in d_exact_len (device int64). An exact part longer than exact_cap
 * is not written: the call's status is then ZCCL_ERR_TRUNCATED, the main
 * part is complete and d_exact_len holds the length needed. exact_out may
 * be main_out + main length (one transport message, main then exact). */
zccl_status zccl_quant_encode(zccl_ctx* ctx, int dtype, int mode, int block, const void* src, int64_t numel,
                              void* main_out, void* exact_out, int64_t exact_cap, int64_t* d_exact_len, void* ws,
                              int64_t ws_size, zccl_stream_t stream, unsigned flags);

/* Decode a message (main_len bytes at main_in, exact_len at exact_in) of
 * numel elements into dst as dtype: the message's dtype, or bfloat16 /
 * float16 for a float32 message (x' rounded once, exact blocks too). */
zccl_status zccl_quant_decode(zccl_ctx* ctx, const void* main_in, int64_t main_len, const void* exact_in,
                              int64_t exact_len, int dtype, int64_t numel, void* dst, void* ws, int64_t ws_size,
                              zccl_stream_t stream, unsigned flags);

/* Dequantize and reduce: acc[i] = acc[i] + x'[i] in float32 (the product
 * code x scale rounded, then the sum; fp8: x' = v x (s / B), v the
 * inverse transform of the codes' values; exact blocks add their elements
 * widened to float32), or acc[i] = x'[i] when first is non-zero. acc holds
 * numel float32 (device). Several messages fold in call order on one
 * stream. */
zccl_status zccl_quant_accumulate(zccl_ctx* ctx, const void* main_in, int64_t main_len, const void* exact_in,
                                  int64_t exact_len, int64_t numel, float* acc, int first, void* ws, int64_t ws_size,
                                  zccl_stream_t stream, unsigned flags);

/* The lossy reductions' own steps (added within ABI 3), elementwise, in
 * stream order, no workspace. Add exact: acc[i] = acc[i] + x[i] in float32
 * (as zccl_quant_accumulate adds), or acc[i] = x[i] when first is non-zero,
 * x being numel elements of dtype at src widened: a rank's own
 * contribution, which it does not quantize. Finish: dst[i] = acc[i] /
 * divisor (when divisor > 1, float32 division: AVG) rounded once to dtype. */
zccl_status zccl_quant_add_exact(zccl_ctx* ctx, int dtype, const void* src, int64_t numel, float* acc, int first,
                                 zccl_stream_t stream, unsigned flags);
zccl_status zccl_quant_finish(zccl_ctx* ctx, const float* acc, int64_t numel, int divisor, int dtype, void* dst,
                              zccl_stream_t stream, unsigned flags);

#ifdef __cplusplus
}
#endif

#endif /* ZIPCCL_CUDA_H */
