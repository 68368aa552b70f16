// ZipcclWork: the c10d::Work of one zipccl call. It owns the zc_op
// descriptions it submitted (one for most calls, one per tensor for the
// *_coalesced calls) and every tensor whose memory Go reads or writes, and it
// completes when all of its parts completed.
#pragma once

#include <mutex>
#include <string>
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

  // --- c10d::Work -----------------------------------------------------------
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void finalize();

  std::vector<at::Tensor> outputs_;
  std::vector<OpSpec> ops_;
  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;

  mutable std::mutex stateMu_; // guards the fields below
  size_t pending_ = 0;
  bool finalized_ = false;
  std::string error_;
  int source_ = -1;
  std::vector<c10::intrusive_ptr<ZipcclWork>> parents_;
};

} // namespace zipccl
