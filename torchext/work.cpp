#include "work.hpp"

#include <optional>
#include <stdexcept>
#include <utility>

#include "cuda_path.hpp"

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
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    error = error_;
    copyBack.swap(copyBack_);
  }
  if (device_) {
    // Copies back on the communication stream, then the end event.
    error = finalizeDevice(*device_, copyBack, error);
    if (!error.empty()) {
      eptr = std::make_exception_ptr(std::runtime_error(error));
    }
  } else if (!error.empty()) {
    eptr = std::make_exception_ptr(std::runtime_error(error));
  } else {
    try {
      c10::AutoGradMode noGrad(false);
      for (auto& [dst, src] : copyBack) {
        dst.copy_(src);
      }
    } catch (const std::exception& e) {
      error = std::string("zipccl: copying results back failed: ") + e.what();
      eptr = std::make_exception_ptr(std::runtime_error(error));
    }
  }
  // Go is done with every buffer: drop the temporaries and input copies.
  copyBack.clear();
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
    // A CUDA-aware future records its events on the current stream: make
    // that the communication stream, after the work.
    std::optional<c10::StreamGuard> streamGuard;
    if (device_) {
      streamGuard.emplace(device_->stream);
    }
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
  std::vector<std::shared_ptr<DeviceState>> devices;
  for (const auto& child : children) {
    devices.push_back(child->device_);
  }
  if (auto merged = mergeDeviceStates(devices)) {
    work->setDevice(std::move(merged));
  }
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

zc_op toZcOp(const OpSpec& s) {
  zc_op z{};
  z.kind = s.kind;
  z.dtype = s.dtype;
  z.redop = s.redop;
  z.root = s.root;
  z.tag = s.tag;
  z.timeout_ms = s.timeoutMs;
  z.premul = s.premul;
  z.n_in = static_cast<int32_t>(s.in.size());
  z.n_out = static_cast<int32_t>(s.out.size());
  z.in = s.in.empty() ? nullptr : s.in.data();
  z.out = s.out.empty() ? nullptr : s.out.data();
  return z;
}

void ZipcclWork::setDevice(std::shared_ptr<DeviceState> state) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      std::vector<c10::Device>{state->device});
  device_ = std::move(state);
}

std::vector<std::pair<at::Tensor, at::Tensor>> ZipcclWork::takeCopyBack() {
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  std::lock_guard<std::mutex> lock(stateMu_);
  out.swap(copyBack_);
  return out;
}

bool ZipcclWork::wait(std::chrono::milliseconds timeout) {
  if (device_ && device_->deferred) {
    // An op of a coalescing block is enqueued when the block ends (as with
    // ProcessGroupNCCL, a synchronous call inside the block does not wait):
    // the work endCoalescing returns orders the caller after it.
    return true;
  }
  if (!device_ || device_->hostWait || timeout != kNoTimeout) {
    // Host works, staged ones and bounded waits: the host waits for
    // completion, then synchronize() orders the caller's stream after the
    // work.
    return c10d::Work::wait(timeout);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_ && exception_) {
      std::rethrow_exception(exception_);
    }
  }
  synchronize();
  return true;
}

void ZipcclWork::synchronize() {
  if (device_) {
    synchronizeDevice(*device_);
  }
}

void ZipcclWork::blockCurrentStream() {
  if (device_) {
    synchronizeDevice(*device_);
    return;
  }
  c10d::Work::blockCurrentStream();
}

} // namespace zipccl
