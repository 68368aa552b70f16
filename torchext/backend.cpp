#include "backend.hpp"
#include "dtypes.hpp"

#include <utility>

namespace zipccl {

// ---------------------------------------------------------------------------
// Lifecycle

ZipcclBackend::ZipcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    std::string groupName,
    std::string options)
    : Backend(rank, size),
      groupName_(std::move(groupName)),
      options_(std::move(options)),
      timeout_(timeout),
      backendOptions_(
          c10::make_intrusive<Backend::Options>(kBackendName, timeout)) {
  checkNotForked();
  TORCH_CHECK(
      size >= 1 && rank >= 0 && rank < size,
      "zipccl: invalid rank ",
      rank,
      " for a group of size ",
      size);
  const Api& a = api();
  store_ = newStoreHandle(store);
  zc_comm_config cfg{};
  cfg.rank = rank;
  cfg.size = size;
  cfg.timeout_ms = timeout.count();
  cfg.store = reinterpret_cast<uintptr_t>(store_);
  cfg.group_name = groupName_.c_str();
  cfg.options = options_.empty() ? nullptr : options_.c_str();
  char err[2048] = {0};
  {
    GilRelease nogil;
    comm_ = a.comm_create(&cfg, err, sizeof(err));
  }
  if (comm_ == 0) {
    delete store_;
    store_ = nullptr;
    closed_ = true;
    TORCH_CHECK(
        false,
        err[0] != '\0' ? std::string(err)
                       : "zipccl: creating the communicator of group '" +
                std::string(groupName_) + "' (rank " + std::to_string(rank) +
                " of " + std::to_string(size) + ") failed with no message");
  }
  backendOptions_->group_name = groupName_;
  init();
}

ZipcclBackend::~ZipcclBackend() {
  // A forked child must not touch Go (nor the parent's store connection);
  // an exiting process must not call into Go either. Both leak instead.
  if (forked() || closed_.load() || exiting()) {
    return;
  }
  try {
    std::lock_guard<std::mutex> lock(commMu_);
    closed_ = true;
    destroyComm();
  } catch (...) {
    // Destructors never throw.
  }
}

void ZipcclBackend::destroyComm() {
  const Api& a = api();
  {
    GilRelease nogil;
    a.comm_destroy(comm_);
  }
  comm_ = 0;
  delete store_;
  store_ = nullptr;
}

void ZipcclBackend::shutdown() {
  checkNotForked();
  std::lock_guard<std::mutex> lock(commMu_);
  if (closed_.exchange(true)) {
    return;
  }
  destroyComm();
}

void ZipcclBackend::abort() {
  checkNotForked();
  std::lock_guard<std::mutex> lock(commMu_);
  if (closed_.exchange(true)) {
    return;
  }
  {
    GilRelease nogil;
    api().comm_abort(comm_, "process group aborted (Backend::abort)");
  }
  destroyComm();
}

void ZipcclBackend::setTimeout(std::chrono::milliseconds timeout) {
  checkNotForked();
  timeout_ = timeout;
  backendOptions_->timeout = timeout;
  std::lock_guard<std::mutex> lock(commMu_);
  if (!closed_.load()) {
    api().comm_set_timeout(comm_, timeout.count());
  }
}

std::string ZipcclBackend::stats() {
  checkUsable("stats");
  const Api& a = api();
  return readJSON(
      [&](char* buf, int32_t cap) { return a.comm_stats(comm_, buf, cap); },
      "zc_comm_stats");
}

c10::intrusive_ptr<c10d::Backend> ZipcclBackend::split(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& ranks,
    const c10::intrusive_ptr<Backend::Options>& opts) {
  checkUsable("split");
  // Counted on every parent rank, member or not, so names agree.
  const int64_t index = splits_.fetch_add(1);
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) {
    return nullptr;
  }
  std::string name = opts ? opts->group_name : std::string();
  if (name.empty()) {
    name = groupName_ + ":split" + std::to_string(index);
  }
  const auto timeout = opts ? opts->timeout : timeout_;
  return c10::make_intrusive<ZipcclBackend>(
      store,
      static_cast<int>(it - ranks.begin()),
      static_cast<int>(ranks.size()),
      timeout,
      name,
      options_);
}

// ---------------------------------------------------------------------------
// Submission

void ZipcclBackend::checkUsable(const char* op) const {
  checkNotForked();
  TORCH_CHECK(
      !closed_.load(),
      "zipccl: ",
      op,
      " on process group '",
      groupName_,
      "' after it was shut down or aborted");
}

int32_t ZipcclBackend::checkRoot(const char* op, int64_t root) const {
  TORCH_CHECK(
      root >= 0 && root < size_,
      "zipccl: ",
      op,
      " rank ",
      root,
      " is outside the group of size ",
      size_);
  return static_cast<int32_t>(root);
}

c10::intrusive_ptr<ZipcclWork> ZipcclBackend::makeWork(
    c10d::OpType type,
    const char* title,
    const std::vector<at::Tensor>& inputs,
    std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<ZipcclWork>(
      rank_, type, title, inputs, std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::launch(
    const c10::intrusive_ptr<ZipcclWork>& work,
    const char* op) {
  // CUDA tensors: the NCCL path is done here; host-staged works continue
  // below over their pinned copies.
  if (!launchDevice(work, op)) {
    // A completion thread may finish the work (and free its ops) as soon
    // as the last part is submitted: take what is needed up front.
    const bool staged = work->device() != nullptr;
    std::vector<zc_op> zops;
    for (const OpSpec& spec : work->ops()) {
      zops.push_back(toZcOp(spec));
      if (staged) {
        zops.back().flags |= ZC_OPF_STAGED; // codes as the coded path does
      }
    }
    const std::string failure = submit(work, zops, op, /*releaseGil=*/false);
    TORCH_CHECK(failure.empty(), failure);
  }
  seq_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(coalesceMu_);
    if (coalescing_) {
      coalesced_.push_back(work);
    }
  }
  return work;
}

std::string ZipcclBackend::submit(
    const c10::intrusive_ptr<ZipcclWork>& work,
    std::vector<zc_op>& zops,
    const char* op,
    bool releaseGil) {
  const Api& a = api();
  const size_t n = zops.size();
  work->expectParts(n);
  char err[2048];
  for (size_t i = 0; i < n; ++i) {
    zops[i].ticket = nextTicket();
    track(zops[i].ticket, work);
    err[0] = '\0';
    int32_t rc = 0;
    {
      std::optional<GilRelease> nogil;
      if (releaseGil) {
        nogil.emplace();
      }
      rc = a.comm_submit(comm_, &zops[i], err, sizeof(err));
    }
    if (rc != ZC_OK) {
      untrack(zops[i].ticket);
      std::string message = err[0] != '\0'
          ? std::string(err)
          : std::string("zipccl: ") + op + " was rejected (error code " +
              std::to_string(rc) + ") with no message";
      // Parts already submitted still complete; the work then fails.
      work->partsAbandoned(n - i, message);
      return message;
    }
  }
  return {};
}

void ZipcclBackend::startCoalescing() {
  checkNotForked();
  std::lock_guard<std::mutex> lock(coalesceMu_);
  TORCH_CHECK(
      !coalescing_,
      "zipccl: startCoalescing called again before endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::endCoalescing() {
  checkNotForked();
  std::vector<c10::intrusive_ptr<ZipcclWork>> children;
  {
    std::lock_guard<std::mutex> lock(coalesceMu_);
    TORCH_CHECK(
        coalescing_, "zipccl: endCoalescing called without startCoalescing");
    coalescing_ = false;
    children.swap(coalesced_);
  }
  flushDevice(children);
  return ZipcclWork::coalesce(rank_, children);
}

} // namespace zipccl
