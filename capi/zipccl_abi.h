/*
 * zipccl C ABI: the types shared by the Go core (libzipccl.so, built from
 * capi/ with -buildmode=c-shared) and the C++ torch shim (torchext/).
 *
 * Rules of the boundary:
 *  - Handles are cgo.Handle integers (uintptr_t). C never holds a Go pointer.
 *  - Tensor memory is passed as raw pointers; the caller keeps it alive until
 *    the op's completion has been delivered by zc_poll.
 *  - Every entry point returns an error code and writes a NUL-terminated
 *    message into the caller's buffer; no Go panic crosses this boundary.
 *  - Completions are pulled by a C++ thread through zc_poll, so torch futures
 *    are never completed on a Go thread.
 *
 * The numeric values of these enums are an ABI: never renumber them.
 */
#ifndef ZIPCCL_ABI_H
#define ZIPCCL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZC_ABI_VERSION 6

/* Element types (match backend/dtype). */
enum {
  ZC_FLOAT32 = 1,
  ZC_FLOAT64 = 2,
  ZC_BFLOAT16 = 3,
  ZC_FLOAT16 = 4,
  ZC_INT8 = 5,
  ZC_UINT8 = 6,
  ZC_INT16 = 7,
  ZC_INT32 = 8,
  ZC_INT64 = 9,
  ZC_BOOL = 10,
  ZC_FLOAT8_E4M3FN = 11,
  ZC_FLOAT8_E5M2 = 12
};

/* Reduce ops (match backend/reduce). */
enum {
  ZC_SUM = 0,
  ZC_AVG = 1,
  ZC_PRODUCT = 2,
  ZC_MIN = 3,
  ZC_MAX = 4,
  ZC_BAND = 5,
  ZC_BOR = 6,
  ZC_BXOR = 7,
  ZC_PREMUL_SUM = 8
};

/* Operation kinds (match backend/comm). */
enum {
  ZC_OP_ALLREDUCE = 1,
  ZC_OP_BROADCAST = 2,
  ZC_OP_REDUCE = 3,
  ZC_OP_ALLGATHER = 4,
  ZC_OP_REDUCE_SCATTER = 5,
  ZC_OP_ALLTOALL = 6,
  ZC_OP_GATHER = 7,
  ZC_OP_SCATTER = 8,
  ZC_OP_SEND = 9,
  ZC_OP_RECV = 10,
  ZC_OP_BARRIER = 11
};

/* Return codes. */
enum {
  ZC_OK = 0,
  ZC_ERR_INVALID = 1,     /* bad argument, unsupported dtype/op: nothing was sent */
  ZC_ERR_COMM = 2,        /* the communicator is broken or closed */
  ZC_ERR_TIMEOUT = 3,
  ZC_ERR_MISMATCH = 4,    /* ranks disagreed on the op */
  ZC_ERR_INTERNAL = 5,
  ZC_ERR_CLOSED = 6       /* zc_poll: the engine shut down */
};

/* One contiguous memory region of numel elements of the op's dtype. */
typedef struct {
  void* ptr;
  int64_t numel;
} zc_buf;

/*
 * One operation. Buffer conventions (N = group size):
 *   ALLREDUCE       in[0] == out[0] (in place)
 *   BROADCAST       in[0] == out[0]; root = source
 *   REDUCE          in[0] input, out[0] result (written on root only)
 *   ALLGATHER       in[0] my shard; out[0..N-1] one per rank (sizes may differ)
 *   REDUCE_SCATTER  in[0..N-1] one per rank; out[0] my reduced shard
 *   ALLTOALL        in[0..N-1] to each rank; out[0..N-1] from each rank
 *   GATHER          in[0]; out[0..N-1] on root only (n_out = 0 elsewhere)
 *   SCATTER         in[0..N-1] on root only; out[0]
 *   SEND            in[0]; root = destination; tag
 *   RECV            out[0]; root = source or -1 for any source; tag
 *   BARRIER         no buffers
 */
typedef struct {
  uint64_t ticket;     /* chosen by the caller, echoed by zc_poll */
  int32_t kind;
  int32_t dtype;
  int32_t redop;
  int32_t root;
  int64_t tag;
  int64_t timeout_ms;  /* <= 0: the communicator's timeout */
  double premul;       /* PREMUL_SUM factor */
  int32_t n_in;
  int32_t n_out;
  const zc_buf* in;
  const zc_buf* out;
  /* ABI 2: CUDA tensors (see "GPU path" at the end). All zero for an op on
   * host memory. */
  int32_t flags;       /* ZC_OPF_* */
  int32_t device;      /* ZC_OPF_DEVICE: the CUDA device of every buffer */
  uint64_t stream;     /* ZC_OPF_DEVICE: the cudaStream_t to enqueue on */
  uintptr_t done;      /* ZC_OPF_DEVICE: the op's end event, for zc_dev_query_fn;
                        * ZC_OPF_ENGINE: the event after which its inputs are
                        * ready (ABI 3) */
} zc_op;

typedef struct {
  uint64_t ticket;
  int32_t status;      /* ZC_OK or an error code */
  int32_t source;      /* RECV: the rank the message came from */
  char message[2048];  /* NUL-terminated error text when status != ZC_OK */
} zc_completion;

/*
 * Store callbacks, implemented by the C++ shim over the c10d::Store that torch
 * passes to the backend. store is the opaque value given to zc_comm_create.
 * They return 0 on success and a nonzero code with a message otherwise.
 * get waits up to timeout_ms for the key; if the value is longer than cap it
 * returns 2 and sets *len to the needed size.
 */
typedef int32_t (*zc_store_set_fn)(uintptr_t store, const char* key,
                                   const void* val, int64_t len, char* err,
                                   int32_t errlen);
typedef int32_t (*zc_store_get_fn)(uintptr_t store, const char* key,
                                   int64_t timeout_ms, void* buf, int64_t cap,
                                   int64_t* len, char* err, int32_t errlen);

typedef struct {
  int32_t rank;
  int32_t size;
  int64_t timeout_ms;
  uintptr_t store;          /* opaque, passed back to the store callbacks */
  const char* group_name;   /* unique per group within the job */
  const char* options;      /* "key=value;key=value" per-group options, may be NULL */
} zc_comm_config;

/*
 * The exported functions of libzipccl.so. The shim resolves them with dlsym,
 * so it is built against this header only, never against the Go library.
 * Functions that take (err, errlen) write a message there on failure.
 */

/* Registers the store callbacks; call once before zc_comm_create. Returns
 * ZC_ABI_VERSION. */
typedef int32_t (*zc_init_fn)(zc_store_set_fn set, zc_store_get_fn get);
/* Creates a communicator; returns its handle, or 0 with a message. Cheap:
 * it publishes this rank's address through the store and connects nothing. */
typedef uintptr_t (*zc_comm_create_fn)(const zc_comm_config* cfg, char* err,
                                       int32_t errlen);
/* Queues one op. ZC_OK means a completion for op->ticket will be delivered by
 * zc_poll; any other code means the op was rejected before a byte was sent. */
typedef int32_t (*zc_comm_submit_fn)(uintptr_t comm, const zc_op* op,
                                     char* err, int32_t errlen);
typedef int32_t (*zc_comm_set_timeout_fn)(uintptr_t comm, int64_t timeout_ms);
/* ABI 3: torch's monitored_barrier with gloo's semantics (rank 0 waits up
 * to timeout_ms for every other rank and names the ones that did not
 * arrive: the first in rank order, or all of them with wait_all). Blocks
 * the calling thread; ZC_OK, or an error code with the message. */
typedef int32_t (*zc_comm_monitored_barrier_fn)(uintptr_t comm,
                                                int64_t timeout_ms,
                                                int32_t wait_all, char* err,
                                                int32_t errlen);
/* Fails every pending op of the communicator and closes its connections. */
typedef int32_t (*zc_comm_abort_fn)(uintptr_t comm, const char* reason);
/* Waits for queued ops (each bounded by its timeout), says goodbye to the
 * peers, and releases the handle. */
typedef int32_t (*zc_comm_destroy_fn)(uintptr_t comm);
/* Writes a JSON object of per-op statistics; returns the length needed. */
typedef int32_t (*zc_comm_stats_fn)(uintptr_t comm, char* buf, int32_t cap);
/* ABI 4: writes the group's ranks grouped by host as a JSON array of
 * arrays of group ranks (backend/hosts), learned from the store the first
 * time (blocking up to the group's timeout for ranks that have not created
 * the group yet); returns the length needed, or -1 with the message. */
typedef int32_t (*zc_comm_hosts_fn)(uintptr_t comm, char* buf, int32_t cap,
                                    char* err, int32_t errlen);
/* ABI 5: replaces the group's lossy policy (backend/lossy: "op=mode,...,
 * min_bytes=N", "" for lossless) for the ops submitted after it. Returns
 * ZC_OK, or an error code with the message (a policy that makes no sense,
 * or asks for a mode zipccl does not have, is refused, and the old one
 * kept). */
typedef int32_t (*zc_comm_set_lossy_fn)(uintptr_t comm, const char* spec,
                                        char* err, int32_t errlen);
/* Waits up to timeout_ms for the next completion of any communicator.
 * Returns 1 when *out was filled, 0 on timeout. */
typedef int32_t (*zc_poll_fn)(int64_t timeout_ms, zc_completion* out);
/* Writes a JSON object describing the build and the machine (versions, CPU
 * features, GPUs, NCCL); returns the length needed. */
typedef int32_t (*zc_info_fn)(char* buf, int32_t cap);

/*
 * Codec (backend/codec): lossless compression of one tensor into the tensor
 * container of docs/FORMAT.md section 7 (dtype + shape + one frame). These
 * functions need no communicator. All pointers are caller-owned and used
 * only during the call; nothing is kept. Errors: ZC_ERR_INVALID with the
 * codec's message (bad argument, or corrupt/truncated/unsupported input),
 * ZC_ERR_INTERNAL for a recovered panic.
 */

/* Codec kinds (match backend/codec.Kind). */
enum {
  ZC_CODEC_RAW = 0,
  ZC_CODEC_ZIP3 = 1,
  ZC_CODEC_HUFF = 2,
  ZC_CODEC_HUFF2 = 3, /* every byte plane Huffman-coded where it pays; CPU only */
  ZC_CODEC_HUFF2P = 4, /* huff2 without alignment padding: stored tensors */
  ZC_CODEC_AUTO = 255
};

#define ZC_CODEC_MAX_DIMS 64

/* A parsed tensor container header. */
typedef struct {
  int32_t dtype;       /* ZC_FLOAT32 ... */
  int32_t kind;        /* kind of the frame: ZC_CODEC_RAW, _ZIP3, _HUFF, _HUFF2 or _HUFF2P */
  int32_t ndim;        /* 0 .. ZC_CODEC_MAX_DIMS */
  int32_t reserved;
  int64_t numel;
  int64_t raw_len;     /* decoded bytes: numel * element size */
  int64_t total_len;   /* bytes of the whole container (header + frame) */
  int64_t shape[ZC_CODEC_MAX_DIMS];
} zc_codec_header;

/* The capacity to give zc_codec_encode_tensor for a tensor of this dtype,
 * shape and requested kind (the result is never longer; the extra room lets
 * the encoder work in place). -1 for an invalid dtype, kind or shape. */
typedef int64_t (*zc_codec_max_len_fn)(int32_t dtype, const int64_t* shape,
                                       int32_t ndim, int32_t kind);
/* Encodes src (nbytes = numel * element size, contiguous) as a tensor
 * container into dst[0..cap), on up to `threads` threads (ABI 6; the bytes
 * are the same for every thread count). On ZC_OK *out_len is the container
 * length and *used_kind the frame's kind (auto resolved; raw for uncoded
 * dtypes or when coding would not shrink the data). When cap is too small
 * the result is ZC_ERR_INVALID with *out_len set to the length needed. */
typedef int32_t (*zc_codec_encode_tensor_fn)(
    const void* src, int64_t nbytes, int32_t dtype, const int64_t* shape,
    int32_t ndim, int32_t kind, int32_t threads, void* dst, int64_t cap,
    int64_t* out_len, int32_t* used_kind, char* err, int32_t errlen);
/* Parses and checks the container's header and its frame header, and that
 * src holds exactly the whole container (no more, no less). Decodes nothing. */
typedef int32_t (*zc_codec_decode_header_fn)(const void* src, int64_t len,
                                             zc_codec_header* out, char* err,
                                             int32_t errlen);
/* Decodes the container src into dst, whose length must be the header's
 * raw_len, on up to `threads` threads (ABI 6). Every check of
 * docs/FORMAT.md section 8 is made, CRCs included; on error dst may hold
 * partial output. */
typedef int32_t (*zc_codec_decode_tensor_fn)(const void* src, int64_t len,
                                             void* dst, int64_t dst_len,
                                             int32_t threads, char* err,
                                             int32_t errlen);
/* Sampled estimate (at most 4096 elements) of the ratio raw / frame length
 * that kind would reach on src; *chosen_kind is the kind it estimated (auto
 * resolved). */
typedef int32_t (*zc_codec_estimate_fn)(const void* src, int64_t nbytes,
                                        int32_t dtype, int32_t kind,
                                        double* ratio, int32_t* chosen_kind,
                                        char* err, int32_t errlen);
/* Runs backend/codec/codecbench on src (nbytes of dtype): memcpy, each codec
 * kind, huff0 and zstd on the same buffer. options_json (may be NULL):
 * {"kinds": ["raw","zip3","huff","auto"], "rounds": 5, "min_time_ms": 50,
 *  "skip_external": false}. Writes the JSON array of rows (NUL-terminated)
 * into out when it fits and returns its length; a length >= cap means it
 * did not fit. Returns -1 on error with a message in err. */
typedef int64_t (*zc_codec_bench_fn)(const void* src, int64_t nbytes,
                                     int32_t dtype, const char* options_json,
                                     char* out, int64_t cap, char* err,
                                     int32_t errlen);

/*
 * GPU path (ABI 2, ZC_DEV_CODED in ABI 3). An op whose buffers are CUDA
 * device memory carries ZC_OPF_DEVICE, its device, the stream it must be
 * enqueued on (the shim makes that stream wait for the caller's current
 * stream first) and a handle of its end event. The shim first asks
 * zc_comm_device_plan how the group runs it:
 *   ZC_DEV_NCCL    submit it as a device op: zc_comm_submit enqueues it on
 *                  the stream before returning (NCCL, or the CUDA kernels and
 *                  NCCL when the switcher codes it), from the calling thread,
 *                  whose current CUDA device must be op->device. The shim then
 *                  records the end event on the stream (after any copy of the
 *                  results it adds); the engine polls it with the query
 *                  callback and delivers the op's completion through zc_poll
 *                  when it completed, or the failure (timeout: the NCCL
 *                  communicators are aborted; NCCL asynchronous errors). An
 *                  error returned by zc_comm_submit means the op failed there.
 *   ZC_DEV_STAGED  run it host-staged: copy the inputs to pinned host memory,
 *                  submit an ordinary host op over those copies, flagged
 *                  ZC_OPF_STAGED, copy the outputs back when it completes
 *                  (the engine has logged the slow path once at WARN, with
 *                  the reason).
 *   ZC_DEV_CODED   submit it with ZC_OPF_DEVICE | ZC_OPF_ENGINE and done set
 *                  to an event recorded on the caller's stream: the engine
 *                  runs it like a host op (its queue, its transport), waits
 *                  for that event before it touches the buffers, codes on the
 *                  GPU what the switcher codes and stages the rest itself;
 *                  every GPU access is finished when zc_poll delivers the
 *                  completion. The shim then records the end event on its
 *                  stream, as for a staged op. stream is unused.
 * Every rank decides the same for the same op. The first plan of a group
 * publishes this rank's GPU capabilities through the store and waits for
 * those of the ranks the op involves (the whole group; the peer of a send
 * or recv), so it blocks like a collective.
 */
enum {
  ZC_OPF_DEVICE = 1,
  ZC_OPF_DEFER = 2,  /* coalescing: enqueued by zc_comm_device_flush */
  ZC_OPF_ENGINE = 4, /* ABI 3: the coded path (ZC_DEV_CODED) */
  ZC_OPF_STAGED = 8  /* ABI 3: a host op over the shim's copies of CUDA tensors */
};
enum { ZC_DEV_NCCL = 1, ZC_DEV_STAGED = 2, ZC_DEV_CODED = 3 };

typedef struct {
  int32_t path;        /* out: ZC_DEV_NCCL, ZC_DEV_STAGED or ZC_DEV_CODED */
  int32_t reserved;
  char reason[1024];   /* out: why this path (NUL-terminated) */
} zc_dev_plan;

/* Reports whether the end event behind done completed: 1 yes, 0 not yet
 * (or not recorded yet), -1 with a message on error. Called from engine
 * threads; implemented by the shim with c10::Event (no CUDA headers). */
typedef int32_t (*zc_dev_query_fn)(uintptr_t done, char* err, int32_t errlen);

/* Registers the query callback; call once after zc_init. Returns
 * ZC_ABI_VERSION. */
typedef int32_t (*zc_init_device_fn)(zc_dev_query_fn query);
/* Decides op's path (op's buffers may be empty; kind, dtype, redop, root and
 * the device fields count). ZC_ERR_INVALID when CUDA tensors cannot run op
 * at all (e.g. a receive from any source), with the message. */
typedef int32_t (*zc_comm_device_plan_fn)(uintptr_t comm, const zc_op* op,
                                          zc_dev_plan* out, char* err,
                                          int32_t errlen);
/* Enqueues the device ops submitted with ZC_OPF_DEFER since the last flush
 * as one NCCL group (so matching sends and receives of a coalescing block
 * cannot deadlock). The caller's current device must be theirs. On error
 * every deferred op also completes with it. */
typedef int32_t (*zc_comm_device_flush_fn)(uintptr_t comm, char* err,
                                           int32_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* ZIPCCL_ABI_H */
