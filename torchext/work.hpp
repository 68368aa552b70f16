// ZipcclWork: the c10d::Work of one zipccl call. It owns the zc_op
// descriptions it submitted (one for most calls, one per tensor for the
// *_coalesced calls) and every tensor whose memory Go reads or writes, and it
// completes when all of its parts completed.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "zipccl_abi.h"
#include "zipccl_torch.hpp"

namespace zipccl {

// One operation as built by the backend; the zc_op handed to Go points into
// in/out, which live as long as the work.
struct OpSpec {
  int32_t kind = 0;
  int32_t dtype = 0;
  int32_t redop = ZC_SUM;
  int32_t root = 0;
  int64_t tag = 0;
  int64_t timeoutMs = 0;
  double premul = 1.0;
  std::vector<zc_buf> in;
  std::vector<zc_buf> out;
};

// The zc_op of spec (no ticket, host memory); its buffers point into spec.
zc_op toZcOp(const OpSpec& spec);

struct DeviceState; // cuda_path.hpp

class ZipcclWork : public c10d::Work {
 public:
  // profilingTitle must be a string literal ("zipccl:<op>"): c10d::Work
  // starts its profiler range from it. outputs are the future's value.
  ZipcclWork(
      int rank,
      c10d::OpType opType,
      const char* profilingTitle,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs);
  ~ZipcclWork() override;

  // --- built by the backend before launch ---------------------------------
  OpSpec& addOp(int32_t kind, int32_t dtype, int64_t timeoutMs);
  // Keeps t alive until completion and returns its zc_buf (t is contiguous).
  zc_buf buffer(const at::Tensor& t);
  // A contiguous tensor holding t's data (t itself when contiguous), kept
  // alive until completion.
  at::Tensor input(const at::Tensor& t);
  // A contiguous tensor Go may write for t: t itself when contiguous,
  // otherwise a temporary copied into t when the work succeeds.
  at::Tensor output(const at::Tensor& t);
  // Like output(), but the temporary starts with t's data (in-place ops).
  at::Tensor inplace(const at::Tensor& t);
  // Copies src into dst when the work succeeds, before the future completes.
  void copyBackOnSuccess(at::Tensor dst, at::Tensor src);
  std::vector<OpSpec>& ops() {
    return ops_;
  }

  // --- completion ---------------------------------------------------------
  // Sets how many parts (submitted ops or child works) must complete.
  void expectParts(size_t n);
  // One part completed: status is ZC_OK or an error code, message the Go
  // text. The last part finishes the work.
  void partDone(int32_t status, int32_t source, const char* message);
  // n parts will never complete (their submit was rejected): counts them as
  // failed with message.
  void partsAbandoned(size_t n, const std::string& message);
  // parent->partDone() is called once this work finished (now, if it did).
  void notifyWhenDone(const c10::intrusive_ptr<ZipcclWork>& parent);
  // A work that covers children (endCoalescing): it completes when every
  // child completed and fails with the first child's error.
  static c10::intrusive_ptr<ZipcclWork> coalesce(
      int rank,
      const std::vector<c10::intrusive_ptr<ZipcclWork>>& children);

  // --- CUDA tensors (cuda_path.cpp) ---------------------------------------
  // Marks the work as one on CUDA memory, before it is launched: its future
  // becomes CUDA-aware, completion goes through finalizeDevice, and wait()
  // follows the device semantics.
  void setDevice(std::shared_ptr<DeviceState> state);
  const std::shared_ptr<DeviceState>& device() const {
    return device_;
  }
  // Every tensor a zc_buf of this work points into.
  const std::vector<at::Tensor>& kept() const {
    return keep_;
  }
  // The result copies (copyBackOnSuccess), taken to be enqueued on the
  // device stream now; empty once the work finalized.
  std::vector<std::pair<at::Tensor, at::Tensor>> takeCopyBack();

  // --- c10d::Work -----------------------------------------------------------
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // CUDA works: the caller's current stream waits for the work's end
  // events. On the NCCL path wait() does only that (no host block, unless
  // a timeout is given), as ProcessGroupNCCL's; host-staged works first
  // wait for the CPU part.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void blockCurrentStream() override;

 private:
  void finalize();

  std::vector<at::Tensor> outputs_;
  std::vector<OpSpec> ops_;
  std::vector<at::Tensor> keep_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<DeviceState> device_; // set before the work is launched

  mutable std::mutex stateMu_; // guards the fields below once launched
  // Taken by finalize(), or earlier by takeCopyBack() on the NCCL path.
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_;
  size_t pending_ = 0;
  bool finalized_ = false;
  std::string error_;
  int source_ = -1;
  std::vector<c10::intrusive_ptr<ZipcclWork>> parents_;
};

} // namespace zipccl
