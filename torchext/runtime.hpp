// The process-wide side of the shim: the Go library loaded with dlopen, the
// fork guard, the ticket registry and the completion threads (pollers).
#pragma once

#include <functional>
#include <cstdint>
#include <string>

#include "zipccl_abi.h"
#include "zipccl_torch.hpp"

namespace zipccl {

class ZipcclWork;

// The exported functions of libzipccl.so, resolved with dlsym.
struct Api {
  zc_init_fn init;
  zc_comm_create_fn comm_create;
  zc_comm_submit_fn comm_submit;
  zc_comm_set_timeout_fn comm_set_timeout;
  zc_comm_monitored_barrier_fn comm_monitored_barrier;
  zc_comm_abort_fn comm_abort;
  zc_comm_destroy_fn comm_destroy;
  zc_comm_stats_fn comm_stats;
  zc_comm_hosts_fn comm_hosts;
  zc_comm_set_lossy_fn comm_set_lossy;
  zc_poll_fn poll;
  zc_info_fn info;
  // The GPU path (cuda_path.cpp).
  zc_init_device_fn init_device;
  zc_comm_device_plan_fn comm_device_plan;
  zc_comm_device_flush_fn comm_device_flush;
  // The codec (codec.cpp): no communicator needed.
  zc_codec_max_len_fn codec_max_len;
  zc_codec_encode_tensor_fn codec_encode_tensor;
  zc_codec_decode_header_fn codec_decode_header;
  zc_codec_decode_tensor_fn codec_decode_tensor;
  zc_codec_estimate_fn codec_estimate;
  zc_codec_bench_fn codec_bench;
};

// Loads libzipccl.so from path once per process: dlopen(RTLD_NOW|RTLD_LOCAL),
// resolves every ABI function, checks the versions zc_init and
// zc_init_device return (the latter registers the CUDA end-event query),
// installs the fork handler and starts the completion threads. A second call
// is a no-op when the path is the same and an error otherwise.
void loadLibrary(const std::string& path);
bool libraryLoaded();
// The loaded library's functions; throws when nothing is loaded yet.
const Api& api();

// True in a child forked from a process that had loaded the library.
bool forked();
// Throws the fork error when forked().
void checkNotForked();
extern const char* const kForkedMessage;

// Set once the interpreter is shutting down (Python atexit, C atexit, or
// Python finalizing): destructors must not call into Go from then on.
void markExiting();
bool exiting();

// Tickets: chosen here, echoed by zc_poll. track() must happen before
// zc_comm_submit; untrack() undoes it when the submit is rejected.
uint64_t nextTicket();
void track(uint64_t ticket, const c10::intrusive_ptr<ZipcclWork>& work);
void untrack(uint64_t ticket);

// Releases the GIL for its lifetime when the calling thread holds it, so that
// blocking Go calls never stall Python callbacks that a completion thread
// (or a Python-implemented store) runs.
class GilRelease {
 public:
  GilRelease();
  ~GilRelease();
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  void* state_ = nullptr;
};

// Copies a message into a C buffer of errlen bytes, always NUL-terminated.
void writeMessage(char* dst, int32_t cap, const std::string& msg);

// The engine's JSON queries (zc_info, zc_comm_stats, zc_comm_hosts) write
// into a caller's buffer and return the length they need: calls fill with
// a big enough buffer and returns the text. A negative return throws,
// naming what failed (fill may throw a better message first).
std::string readJSON(
    const std::function<int32_t(char*, int32_t)>& fill,
    const char* what);

} // namespace zipccl
