#include "work.hpp"

#include <stdexcept>
#include <utility>

namespace zipccl {

ZipcclWork::ZipcclWork(
    int rank,
    c10d::OpType opType,
    const char* profilingTitle,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs)
    : c10d::Work(
          rank,
          opType,
          profilingTitle,
          std::optional<std::vector<at::Tensor>>(inputs)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

ZipcclWork::~ZipcclWork() = default;

OpSpec& ZipcclWork::addOp(int32_t kind, int32_t dtype, int64_t timeoutMs) {
  OpSpec& op = ops_.emplace_back();
  op.kind = kind;
  op.dtype = dtype;
  op.timeoutMs = timeoutMs;
  return op;
}

zc_buf ZipcclWork::buffer(const at::Tensor& t) {
  keep_.push_back(t);
  return zc_buf{t.data_ptr(), t.numel()};
}

at::Tensor ZipcclWork::input(const at::Tensor& t) {
  return t.contiguous();
}

at::Tensor ZipcclWork::output(const at::Tensor& t) {
  if (t.is_contiguous()) {
    return t;
  }
  at::Tensor tmp = at::empty(t.sizes(), t.options());
  copyBackOnSuccess(t, tmp);
  return tmp;
}

at::Tensor ZipcclWork::inplace(const at::Tensor& t) {
  if (t.is_contiguous()) {
    return t;
  }
  at::Tensor tmp = t.contiguous();
  copyBackOnSuccess(t, tmp);
  return tmp;
}

void ZipcclWork::copyBackOnSuccess(at::Tensor dst, at::Tensor src) {
  copyBack_.emplace_back(std::move(dst), std::move(src));
}

void ZipcclWork::expectParts(size_t n) {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    pending_ = n;
    if (n > 0) {
      return;
    }
  }
  finalize();
}

void ZipcclWork::partDone(
    int32_t status,
    int32_t source,
    const char* message) {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (status != ZC_OK && error_.empty()) {
      error_ = (message != nullptr && message[0] != '\0')
          ? std::string(message)
          : "zipccl: operation failed with error code " +
              std::to_string(status) + " and no message";
    }
    if (status == ZC_OK && source >= 0) {
      source_ = source;
    }
    TORCH_INTERNAL_ASSERT(pending_ > 0, "zipccl: completion without a part");
    if (--pending_ > 0) {
      return;
    }
  }
  finalize();
}

void ZipcclWork::partsAbandoned(size_t n, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (error_.empty()) {
      error_ = message;
    }
    TORCH_INTERNAL_ASSERT(pending_ >= n, "zipccl: more parts than pending");
    pending_ -= n;
    if (pending_ > 0) {
      return;
    }
  }
  finalize();
}

void ZipcclWork::notifyWhenDone(const c10::intrusive_ptr<ZipcclWork>& parent) {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (!finalized_) {
      parents_.push_back(parent);
      return;
    }
    error = error_;
  }
  parent->partDone(error.empty() ? ZC_OK : ZC_ERR_INTERNAL, -1, error.c_str());
}

// Runs once, on the thread that completed the last part: the completion
// thread, or the caller's thread when nothing was left in flight.
void ZipcclWork::finalize() {
  std::exception_ptr eptr;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    error = error_;
  }
  if (!error.empty()) {
    eptr = std::make_exception_ptr(std::runtime_error(error));
  } else {
    try {
      c10::AutoGradMode noGrad(false);
      for (auto& [dst, src] : copyBack_) {
        dst.copy_(src);
      }
    } catch (const std::exception& e) {
      error = std::string("zipccl: copying results back failed: ") + e.what();
      eptr = std::make_exception_ptr(std::runtime_error(error));
    }
  }
  // Go is done with every buffer: drop the temporaries and input copies.
  copyBack_.clear();
  keep_.clear();
  ops_.clear();

  std::vector<c10::intrusive_ptr<ZipcclWork>> parents;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    error_ = error;
    finalized_ = true;
    parents.swap(parents_);
  }
  finish(eptr);
  try {
    // Runs the future's callbacks (Python ones too) on this thread.
    if (eptr) {
      future_->setError(eptr);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  } catch (const std::exception& e) {
    TORCH_WARN("zipccl: a callback on a work's future raised: ", e.what());
  }
  for (auto& parent : parents) {
    parent->partDone(
        error.empty() ? ZC_OK : ZC_ERR_INTERNAL, -1, error.c_str());
  }
}

c10::intrusive_ptr<ZipcclWork> ZipcclWork::coalesce(
    int rank,
    const std::vector<c10::intrusive_ptr<ZipcclWork>>& children) {
  std::vector<at::Tensor> outputs;
  for (const auto& child : children) {
    outputs.insert(
        outputs.end(), child->outputs_.begin(), child->outputs_.end());
  }
  auto work = c10::make_intrusive<ZipcclWork>(
      rank,
      c10d::OpType::COALESCED,
      "zipccl:coalesced",
      std::vector<at::Tensor>{},
      std::move(outputs));
  {
    std::lock_guard<std::mutex> lock(work->stateMu_);
    work->pending_ = children.size();
  }
  if (children.empty()) {
    work->finalize();
    return work;
  }
  for (const auto& child : children) {
    child->notifyWhenDone(work);
  }
  return work;
}

int ZipcclWork::sourceRank() const {
  std::lock_guard<std::mutex> lock(stateMu_);
  return source_;
}

std::vector<at::Tensor> ZipcclWork::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> ZipcclWork::getFuture() {
  return future_;
}

} // namespace zipccl
