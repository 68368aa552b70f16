#include "backend.hpp"
#include "dtypes.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

namespace zipccl {

namespace {

// The single place that decides which devices and layouts the shim
// handles: CPU tensors here, the rest in checkDeviceTensor (cuda_path.cpp).
void checkTensor(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "zipccl: ", op, " got an undefined tensor");
  TORCH_CHECK(
      t.layout() == c10::kStrided,
      "zipccl: ",
      op,
      " does not support ",
      t.layout(),
      " tensors");
  if (!t.is_cpu()) {
    checkDeviceTensor(op, t);
  }
}

int32_t zcDtype(const char* op, at::ScalarType type) {
  const int32_t zc = zcDtypeOf(type);
  TORCH_CHECK(
      zc >= 0,
      "zipccl: ",
      op,
      " does not support dtype ",
      type,
      " (supported: Float, Double, BFloat16, Half, Char, Byte, Short, "
      "Int, Long, Bool, Float8_e4m3fn, Float8_e5m2)");
  return zc;
}

// Every tensor checked and of the dtype of the first; returns the zc dtype.
int32_t commonDtype(
    const char* op,
    const std::vector<at::Tensor>& tensors,
    std::optional<at::ScalarType> expected = std::nullopt) {
  TORCH_CHECK(!tensors.empty(), "zipccl: ", op, " got no tensors");
  at::ScalarType type = expected.value_or(tensors[0].scalar_type());
  // Mixed devices first: the clearer message. launchDevice checks the
  // devices of the whole work again.
  commonDevice(op, tensors);
  for (const auto& t : tensors) {
    checkTensor(op, t);
    TORCH_CHECK(
        t.scalar_type() == type,
        "zipccl: ",
        op,
        " needs tensors of one dtype, got ",
        type,
        " and ",
        t.scalar_type());
  }
  return zcDtype(op, type);
}

void setRedOp(const char* op, const c10d::ReduceOp& reduceOp, OpSpec& spec) {
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM:
      spec.redop = ZC_SUM;
      return;
    case c10d::ReduceOp::AVG:
      spec.redop = ZC_AVG;
      return;
    case c10d::ReduceOp::PRODUCT:
      spec.redop = ZC_PRODUCT;
      return;
    case c10d::ReduceOp::MIN:
      spec.redop = ZC_MIN;
      return;
    case c10d::ReduceOp::MAX:
      spec.redop = ZC_MAX;
      return;
    case c10d::ReduceOp::BAND:
      spec.redop = ZC_BAND;
      return;
    case c10d::ReduceOp::BOR:
      spec.redop = ZC_BOR;
      return;
    case c10d::ReduceOp::BXOR:
      spec.redop = ZC_BXOR;
      return;
    case c10d::ReduceOp::PREMUL_SUM: {
      const auto* supplement = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(
          reduceOp.supplement_.get());
      TORCH_CHECK(
          supplement != nullptr,
          "zipccl: ",
          op,
          " got PREMUL_SUM without its factor (use "
          "torch.distributed._make_nccl_premul_sum)");
      spec.redop = ZC_PREMUL_SUM;
      spec.premul = supplement->tensor_factor.defined()
          ? supplement->tensor_factor.item<double>()
          : supplement->double_factor;
      return;
    }
    default:
      TORCH_CHECK(
          false,
          "zipccl: ",
          op,
          " does not support reduce op ",
          static_cast<int>(reduceOp.op_));
  }
}

int64_t timeoutMs(std::chrono::milliseconds timeout) {
  // kUnsetTimeout (-1) and 0 mean "the communicator's timeout".
  return timeout.count() > 0 ? timeout.count() : 0;
}

void checkCount(
    const char* op,
    const char* what,
    size_t got,
    size_t want,
    const char* why) {
  TORCH_CHECK(
      got == want,
      "zipccl: ",
      op,
      " expects ",
      want,
      " ",
      what,
      " (",
      why,
      "), got ",
      got);
}

// N zc_bufs over a contiguous tensor, the i-th holding counts[i] elements.
void appendChunks(
    std::vector<zc_buf>& bufs,
    ZipcclWork& work,
    const at::Tensor& flat,
    const std::vector<int64_t>& counts) {
  zc_buf whole = work.buffer(flat);
  auto* base = static_cast<char*>(whole.ptr);
  const auto elementSize = static_cast<int64_t>(flat.element_size());
  int64_t offset = 0;
  for (int64_t count : counts) {
    bufs.push_back(zc_buf{
        base == nullptr ? nullptr : base + offset * elementSize, count});
    offset += count;
  }
}

// alltoall_base element counts per rank of one side: equal rows of dim 0
// when splits is empty, otherwise splits[i] rows.
std::vector<int64_t> splitCounts(
    const char* op,
    const char* side,
    const at::Tensor& t,
    const std::vector<int64_t>& splits,
    int size) {
  TORCH_CHECK(
      t.dim() >= 1, "zipccl: ", op, " needs ", side, " tensors of dim >= 1");
  const int64_t rows = t.size(0);
  const int64_t rowNumel = rows == 0
      ? std::accumulate(
            t.sizes().begin() + 1,
            t.sizes().end(),
            int64_t{1},
            std::multiplies<int64_t>())
      : t.numel() / rows;
  std::vector<int64_t> counts(size);
  if (splits.empty()) {
    TORCH_CHECK(
        rows % size == 0,
        "zipccl: ",
        op,
        " ",
        side,
        " dim 0 (",
        rows,
        ") is not divisible by the group size ",
        size,
        " and no split sizes were given");
    std::fill(counts.begin(), counts.end(), rows / size * rowNumel);
    return counts;
  }
  checkCount(op, "split sizes", splits.size(), size, side);
  int64_t sum = 0;
  for (int i = 0; i < size; ++i) {
    TORCH_CHECK(
        splits[i] >= 0,
        "zipccl: ",
        op,
        " ",
        side,
        " split size ",
        i,
        " is negative");
    sum += splits[i];
    counts[i] = splits[i] * rowNumel;
  }
  TORCH_CHECK(
      sum == rows,
      "zipccl: ",
      op,
      " ",
      side,
      " split sizes sum to ",
      sum,
      " but dim 0 has ",
      rows,
      " rows");
  return counts;
}

} // namespace

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

// ---------------------------------------------------------------------------
// Collectives

c10::intrusive_ptr<c10d::Work> ZipcclBackend::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  static constexpr const char* kOp = "all_reduce";
  if (!tensors.empty() && tensors[0].defined() && tensors[0].is_sparse()) {
    return allreduceSparse(tensors, opts); // sparse.cpp
  }
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "tensors", tensors.size(), 1, "one per process");
  const int32_t dtype = commonDtype(kOp, tensors);
  auto work =
      makeWork(c10d::OpType::ALLREDUCE, "zipccl:all_reduce", tensors, tensors);
  OpSpec& op = work->addOp(ZC_OP_ALLREDUCE, dtype, timeoutMs(opts.timeout));
  setRedOp(kOp, opts.reduceOp, op);
  const zc_buf buf = work->buffer(work->inplace(tensors[0]));
  op.in = {buf};
  op.out = {buf};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  static constexpr const char* kOp = "all_reduce_coalesced";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  const int32_t dtype = commonDtype(kOp, tensors);
  int64_t total = 0;
  for (const auto& t : tensors) {
    total += t.numel();
  }
  // One flat buffer, one ALLREDUCE; the slices go back on completion.
  at::Tensor flat = at::empty({total}, tensors[0].options());
  auto work = makeWork(
      c10d::OpType::ALLREDUCE_COALESCED,
      "zipccl:all_reduce_coalesced",
      tensors,
      tensors);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    at::Tensor slice = flat.narrow(0, offset, t.numel()).view(t.sizes());
    slice.copy_(t);
    work->copyBackOnSuccess(t, slice);
    offset += t.numel();
  }
  OpSpec& op = work->addOp(ZC_OP_ALLREDUCE, dtype, timeoutMs(opts.timeout));
  setRedOp(kOp, opts.reduceOp, op);
  const zc_buf buf = work->buffer(flat);
  op.in = {buf};
  op.out = {buf};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  static constexpr const char* kOp = "broadcast";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "tensors", tensors.size(), 1, "one per process");
  TORCH_CHECK(
      opts.rootTensor == 0, "zipccl: broadcast supports rootTensor 0 only");
  const int32_t dtype = commonDtype(kOp, tensors);
  const int32_t root = checkRoot(kOp, opts.rootRank);
  auto work =
      makeWork(c10d::OpType::BROADCAST, "zipccl:broadcast", tensors, tensors);
  OpSpec& op = work->addOp(ZC_OP_BROADCAST, dtype, timeoutMs(opts.timeout));
  op.root = root;
  const zc_buf buf = work->buffer(work->inplace(tensors[0]));
  op.in = {buf};
  op.out = {buf};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  static constexpr const char* kOp = "reduce";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "tensors", tensors.size(), 1, "one per process");
  TORCH_CHECK(opts.rootTensor == 0, "zipccl: reduce supports rootTensor 0 only");
  const int32_t dtype = commonDtype(kOp, tensors);
  const int32_t root = checkRoot(kOp, opts.rootRank);
  auto work = makeWork(c10d::OpType::REDUCE, "zipccl:reduce", tensors, tensors);
  OpSpec& op = work->addOp(ZC_OP_REDUCE, dtype, timeoutMs(opts.timeout));
  setRedOp(kOp, opts.reduceOp, op);
  op.root = root;
  const at::Tensor& t = tensors[0];
  // A separate result buffer: the engine may use it as scratch on any rank,
  // and only the root's result is copied into the tensor.
  at::Tensor result = at::empty(t.sizes(), t.options());
  if (rank_ == root) {
    work->copyBackOnSuccess(t, result);
  }
  op.in = {work->buffer(work->input(t))};
  op.out = {work->buffer(result)};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  static constexpr const char* kOp = "all_gather";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "input tensors", inputTensors.size(), 1, "one per process");
  checkCount(kOp, "output lists", outputTensors.size(), 1, "one per process");
  auto work = makeWork(
      c10d::OpType::ALLGATHER,
      "zipccl:all_gather",
      inputTensors,
      outputTensors[0]);
  addAllgather(*work, kOp, outputTensors[0], inputTensors[0], opts);
  return launch(work, kOp);
}

void ZipcclBackend::addAllgather(
    ZipcclWork& work,
    const char* op,
    const std::vector<at::Tensor>& outputs,
    const at::Tensor& input,
    const c10d::AllgatherOptions& opts) {
  checkCount(op, "output tensors", outputs.size(), size_, "one per rank");
  const int32_t dtype = commonDtype(op, {input});
  commonDtype(op, outputs, input.scalar_type());
  TORCH_CHECK(
      outputs[rank_].numel() == input.numel(),
      "zipccl: ",
      op,
      " output tensor of this rank (",
      rank_,
      ") has ",
      outputs[rank_].numel(),
      " elements but the input has ",
      input.numel());
  OpSpec& spec = work.addOp(ZC_OP_ALLGATHER, dtype, timeoutMs(opts.timeout));
  spec.in = {work.buffer(work.input(input))};
  for (const auto& out : outputs) {
    spec.out.push_back(work.buffer(work.output(out)));
  }
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  static constexpr const char* kOp = "all_gather_into_tensor";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  auto work = makeWork(
      c10d::OpType::_ALLGATHER_BASE,
      "zipccl:all_gather_into_tensor",
      {inputBuffer},
      {outputBuffer});
  addAllgatherBase(*work, kOp, outputBuffer, inputBuffer, opts);
  return launch(work, kOp);
}

void ZipcclBackend::addAllgatherBase(
    ZipcclWork& work,
    const char* op,
    const at::Tensor& output,
    const at::Tensor& input,
    const c10d::AllgatherOptions& opts) {
  const int32_t dtype = commonDtype(op, {input, output});
  TORCH_CHECK(
      output.numel() == size_ * input.numel(),
      "zipccl: ",
      op,
      " output has ",
      output.numel(),
      " elements; it must have group size (",
      size_,
      ") x input elements (",
      input.numel(),
      ") = ",
      size_ * input.numel());
  OpSpec& spec = work.addOp(ZC_OP_ALLGATHER, dtype, timeoutMs(opts.timeout));
  spec.in = {work.buffer(work.input(input))};
  appendChunks(
      spec.out,
      work,
      work.output(output),
      std::vector<int64_t>(size_, input.numel()));
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  static constexpr const char* kOp = "all_gather_coalesced";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  // torch's (and gloo's) layout: one list per rank, each shaped like the
  // inputs (outputTensorLists[r][k] receives rank r's input k).
  checkCount(
      kOp,
      "output lists",
      outputTensorLists.size(),
      static_cast<size_t>(size_),
      "one per rank");
  std::vector<at::Tensor> outputs;
  for (const auto& list : outputTensorLists) {
    checkCount(
        kOp,
        "tensors in each output list",
        list.size(),
        inputTensors.size(),
        "one per input tensor");
    outputs.insert(outputs.end(), list.begin(), list.end());
  }
  auto work = makeWork(
      c10d::OpType::ALLGATHER_COALESCED,
      "zipccl:all_gather_coalesced",
      inputTensors,
      outputs);
  for (size_t k = 0; k < inputTensors.size(); ++k) {
    std::vector<at::Tensor> perRank;
    perRank.reserve(outputTensorLists.size());
    for (auto& list : outputTensorLists) {
      perRank.push_back(list[k]);
    }
    addAllgather(*work, kOp, perRank, inputTensors[k], opts);
  }
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  static constexpr const char* kOp = "all_gather_into_tensor_coalesced";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(
      kOp, "output tensors", outputs.size(), inputs.size(), "one per input");
  auto work = makeWork(
      kOpAllgatherIntoTensorCoalesced,
      "zipccl:all_gather_into_tensor_coalesced",
      inputs,
      outputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    addAllgatherBase(*work, kOp, outputs[i], inputs[i], opts);
  }
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* kOp = "reduce_scatter";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "output tensors", outputTensors.size(), 1, "one per process");
  checkCount(kOp, "input lists", inputTensors.size(), 1, "one per process");
  const std::vector<at::Tensor>& inputs = inputTensors[0];
  const at::Tensor& output = outputTensors[0];
  checkCount(kOp, "input tensors", inputs.size(), size_, "one per rank");
  const int32_t dtype = commonDtype(kOp, {output});
  commonDtype(kOp, inputs, output.scalar_type());
  for (const auto& in : inputs) {
    TORCH_CHECK(
        in.numel() == output.numel(),
        "zipccl: reduce_scatter input tensors must have the output's ",
        output.numel(),
        " elements, got one with ",
        in.numel());
  }
  auto work = makeWork(
      c10d::OpType::REDUCE_SCATTER,
      "zipccl:reduce_scatter",
      inputs,
      outputTensors);
  OpSpec& op = work->addOp(ZC_OP_REDUCE_SCATTER, dtype, timeoutMs(opts.timeout));
  setRedOp(kOp, opts.reduceOp, op);
  for (const auto& in : inputs) {
    op.in.push_back(work->buffer(work->input(in)));
  }
  op.out = {work->buffer(work->output(output))};
  return launch(work, kOp);
}

void ZipcclBackend::addReduceScatterBase(
    ZipcclWork& work,
    const char* op,
    const at::Tensor& output,
    const at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  const int32_t dtype = commonDtype(op, {input, output});
  TORCH_CHECK(
      input.numel() == size_ * output.numel(),
      "zipccl: ",
      op,
      " input has ",
      input.numel(),
      " elements; it must have group size (",
      size_,
      ") x output elements (",
      output.numel(),
      ") = ",
      size_ * output.numel());
  OpSpec& spec =
      work.addOp(ZC_OP_REDUCE_SCATTER, dtype, timeoutMs(opts.timeout));
  setRedOp(op, opts.reduceOp, spec);
  appendChunks(
      spec.in,
      work,
      work.input(input),
      std::vector<int64_t>(size_, output.numel()));
  spec.out = {work.buffer(work.output(output))};
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* kOp = "reduce_scatter_tensor";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  auto work = makeWork(
      c10d::OpType::_REDUCE_SCATTER_BASE,
      "zipccl:reduce_scatter_tensor",
      {inputBuffer},
      {outputBuffer});
  addReduceScatterBase(*work, kOp, outputBuffer, inputBuffer, opts);
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* kOp = "reduce_scatter_tensor_coalesced";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(
      kOp, "output tensors", outputs.size(), inputs.size(), "one per input");
  auto work = makeWork(
      kOpReduceScatterTensorCoalesced,
      "zipccl:reduce_scatter_tensor_coalesced",
      inputs,
      outputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    addReduceScatterBase(*work, kOp, outputs[i], inputs[i], opts);
  }
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  static constexpr const char* kOp = "all_to_all_single";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  const int32_t dtype = commonDtype(kOp, {inputBuffer, outputBuffer});
  std::vector<int64_t> inCounts;
  std::vector<int64_t> outCounts;
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    // Equal splits of the flat tensors.
    TORCH_CHECK(
        inputBuffer.numel() % size_ == 0,
        "zipccl: all_to_all_single input has ",
        inputBuffer.numel(),
        " elements, not divisible by the group size ",
        size_);
    TORCH_CHECK(
        outputBuffer.numel() == inputBuffer.numel(),
        "zipccl: all_to_all_single with equal splits needs input and output "
        "of the same number of elements, got ",
        inputBuffer.numel(),
        " and ",
        outputBuffer.numel());
    inCounts.assign(size_, inputBuffer.numel() / size_);
    outCounts = inCounts;
  } else {
    inCounts = splitCounts(kOp, "input", inputBuffer, inputSplitSizes, size_);
    outCounts =
        splitCounts(kOp, "output", outputBuffer, outputSplitSizes, size_);
  }
  auto work = makeWork(
      c10d::OpType::ALLTOALL_BASE,
      "zipccl:all_to_all_single",
      {inputBuffer},
      {outputBuffer});
  OpSpec& op = work->addOp(ZC_OP_ALLTOALL, dtype, timeoutMs(opts.timeout));
  appendChunks(op.in, *work, work->input(inputBuffer), inCounts);
  appendChunks(op.out, *work, work->output(outputBuffer), outCounts);
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  static constexpr const char* kOp = "all_to_all";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "input tensors", inputTensors.size(), size_, "one per rank");
  checkCount(
      kOp, "output tensors", outputTensors.size(), size_, "one per rank");
  const int32_t dtype = commonDtype(kOp, inputTensors);
  commonDtype(kOp, outputTensors, inputTensors[0].scalar_type());
  auto work = makeWork(
      c10d::OpType::ALLTOALL, "zipccl:all_to_all", inputTensors, outputTensors);
  OpSpec& op = work->addOp(ZC_OP_ALLTOALL, dtype, timeoutMs(opts.timeout));
  for (const auto& in : inputTensors) {
    op.in.push_back(work->buffer(work->input(in)));
  }
  for (const auto& out : outputTensors) {
    op.out.push_back(work->buffer(work->output(out)));
  }
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  static constexpr const char* kOp = "gather";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  const int32_t root = checkRoot(kOp, opts.rootRank);
  checkCount(kOp, "input tensors", inputTensors.size(), 1, "one per process");
  const at::Tensor& input = inputTensors[0];
  const int32_t dtype = commonDtype(kOp, inputTensors);
  std::vector<at::Tensor> outputs;
  if (rank_ == root) {
    checkCount(kOp, "output lists", outputTensors.size(), 1, "on the root");
    outputs = outputTensors[0];
    checkCount(kOp, "output tensors", outputs.size(), size_, "one per rank");
    commonDtype(kOp, outputs, input.scalar_type());
    for (const auto& out : outputs) {
      TORCH_CHECK(
          out.numel() == input.numel(),
          "zipccl: gather output tensors must have the input's ",
          input.numel(),
          " elements, got one with ",
          out.numel());
    }
  } else {
    TORCH_CHECK(
        outputTensors.empty() ||
            (outputTensors.size() == 1 && outputTensors[0].empty()),
        "zipccl: gather takes output tensors on the root (rank ",
        root,
        ") only");
  }
  auto work = makeWork(c10d::OpType::GATHER, "zipccl:gather", inputTensors, outputs);
  OpSpec& op = work->addOp(ZC_OP_GATHER, dtype, timeoutMs(opts.timeout));
  op.root = root;
  op.in = {work->buffer(work->input(input))};
  for (const auto& out : outputs) {
    op.out.push_back(work->buffer(work->output(out)));
  }
  return launch(work, kOp);
}

#if ZIPCCL_HAS_GATHER_INTO_TENSOR
c10::intrusive_ptr<c10d::Work> ZipcclBackend::gather_into_tensor(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::GatherOptions& opts) {
  static constexpr const char* kOp = "gather_into_tensor";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  const int32_t root = checkRoot(kOp, opts.rootRank);
  const int32_t dtype = commonDtype(kOp, {inputBuffer});
  std::vector<at::Tensor> outputs;
  if (rank_ == root) {
    commonDtype(kOp, {outputBuffer}, inputBuffer.scalar_type());
    TORCH_CHECK(
        outputBuffer.numel() == size_ * inputBuffer.numel(),
        "zipccl: gather_into_tensor output has ",
        outputBuffer.numel(),
        " elements; it must have group size (",
        size_,
        ") x input elements (",
        inputBuffer.numel(),
        ") = ",
        size_ * inputBuffer.numel());
    outputs = {outputBuffer};
  }
  auto work = makeWork(
      c10d::OpType::GATHER, "zipccl:gather_into_tensor", {inputBuffer}, outputs);
  OpSpec& op = work->addOp(ZC_OP_GATHER, dtype, timeoutMs(opts.timeout));
  op.root = root;
  op.in = {work->buffer(work->input(inputBuffer))};
  if (rank_ == root) {
    appendChunks(
        op.out,
        *work,
        work->output(outputBuffer),
        std::vector<int64_t>(size_, inputBuffer.numel()));
  }
  return launch(work, kOp);
}
#endif

c10::intrusive_ptr<c10d::Work> ZipcclBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  static constexpr const char* kOp = "scatter";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  const int32_t root = checkRoot(kOp, opts.rootRank);
  checkCount(kOp, "output tensors", outputTensors.size(), 1, "one per process");
  const at::Tensor& output = outputTensors[0];
  const int32_t dtype = commonDtype(kOp, outputTensors);
  std::vector<at::Tensor> inputs;
  if (rank_ == root) {
    checkCount(kOp, "input lists", inputTensors.size(), 1, "on the root");
    inputs = inputTensors[0];
    checkCount(kOp, "input tensors", inputs.size(), size_, "one per rank");
    commonDtype(kOp, inputs, output.scalar_type());
    for (const auto& in : inputs) {
      TORCH_CHECK(
          in.numel() == output.numel(),
          "zipccl: scatter input tensors must have the output's ",
          output.numel(),
          " elements, got one with ",
          in.numel());
    }
  } else {
    TORCH_CHECK(
        inputTensors.empty() ||
            (inputTensors.size() == 1 && inputTensors[0].empty()),
        "zipccl: scatter takes input tensors on the root (rank ",
        root,
        ") only");
  }
  auto work =
      makeWork(c10d::OpType::SCATTER, "zipccl:scatter", inputs, outputTensors);
  OpSpec& op = work->addOp(ZC_OP_SCATTER, dtype, timeoutMs(opts.timeout));
  op.root = root;
  for (const auto& in : inputs) {
    op.in.push_back(work->buffer(work->input(in)));
  }
  op.out = {work->buffer(work->output(output))};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  static constexpr const char* kOp = "send";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "tensors", tensors.size(), 1, "one per process");
  const int32_t dtype = commonDtype(kOp, tensors);
  const int32_t dst = checkRoot(kOp, dstRank);
  auto work = makeWork(c10d::OpType::SEND, "zipccl:send", tensors, {});
  OpSpec& op = work->addOp(ZC_OP_SEND, dtype, 0);
  op.root = dst;
  op.tag = tag;
  op.in = {work->buffer(work->input(tensors[0]))};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  static constexpr const char* kOp = "recv";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "tensors", tensors.size(), 1, "one per process");
  const int32_t dtype = commonDtype(kOp, tensors);
  const int32_t src = checkRoot(kOp, srcRank);
  auto work = makeWork(c10d::OpType::RECV, "zipccl:recv", {}, tensors);
  OpSpec& op = work->addOp(ZC_OP_RECV, dtype, 0);
  op.root = src;
  op.tag = tag;
  op.out = {work->buffer(work->output(tensors[0]))};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  static constexpr const char* kOp = "recv_anysource";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  checkCount(kOp, "tensors", tensors.size(), 1, "one per process");
  const int32_t dtype = commonDtype(kOp, tensors);
  auto work = makeWork(
      c10d::OpType::RECVANYSOURCE, "zipccl:recv_anysource", {}, tensors);
  OpSpec& op = work->addOp(ZC_OP_RECV, dtype, 0);
  op.root = -1;
  op.tag = tag;
  op.out = {work->buffer(work->output(tensors[0]))};
  return launch(work, kOp);
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::barrier(
    const c10d::BarrierOptions& opts) {
  static constexpr const char* kOp = "barrier";
  checkUsable(kOp);
  auto work = makeWork(c10d::OpType::BARRIER, "zipccl:barrier", {}, {});
  work->addOp(ZC_OP_BARRIER, ZC_UINT8, timeoutMs(opts.timeout));
  return launch(work, kOp);
}

} // namespace zipccl
