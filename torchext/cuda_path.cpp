#include "cuda_path.hpp"

#include <exception>

#include "backend.hpp"
#include "runtime.hpp"
#include "work.hpp"

namespace zipccl {

// ---------------------------------------------------------------------------
// DeviceSync and DeviceStreams

DeviceSync::DeviceSync(c10::Stream stream)
    : stream_(stream), event_(stream.device_type()) {}

void DeviceSync::record() {
  std::lock_guard<std::mutex> lock(mu_);
  if (recorded_) {
    return;
  }
  event_.record(stream_);
  recorded_ = true;
}

bool DeviceSync::query() {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_ && event_.query();
}

void DeviceSync::block(const c10::Stream& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (recorded_) {
    event_.block(stream);
  }
}

c10::Stream DeviceStreams::get(c10::Device device, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(static_cast<int>(device.index()), peer);
  auto it = streams_.find(key);
  if (it != streams_.end()) {
    return it->second;
  }
  c10::impl::VirtualGuardImpl impl(device.type());
  c10::Stream stream =
      impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  streams_.emplace(key, stream);
  return stream;
}

// ---------------------------------------------------------------------------
// Checks

void checkDeviceTensor(const char* op, const at::Tensor& t) {
  TORCH_CHECK(
      t.is_cuda(),
      "zipccl: ",
      op,
      " got a tensor on ",
      t.device(),
      "; zipccl handles CPU and CUDA tensors only");
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  if (t.numel() == 0 || (storage && storage.data() != nullptr)) {
    return;
  }
  // A tensor that only claims the device (a wrapper subclass without memory
  // of its own): rejected here, where the message can say so, rather than
  // in data_ptr() or in the CUDA runtime.
  c10::DeviceIndex devices = 0;
  try {
    // Throws on a torch built without CUDA; 0 without a driver or GPU.
    devices = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).deviceCount();
  } catch (const std::exception&) {
    devices = 0;
  }
  TORCH_CHECK(
      false,
      "zipccl: ",
      op,
      " got a tensor on ",
      t.device(),
      " without device memory (a tensor subclass?)",
      devices > 0 ? "; pass a plain CUDA tensor"
                  : "; this process sees no CUDA device "
                    "(torch.cuda.is_available() is False)");
}

std::optional<c10::Device> commonDevice(
    const char* op,
    const std::vector<at::Tensor>& tensors) {
  std::optional<c10::Device> device;
  bool cpu = false;
  for (const auto& t : tensors) {
    if (!t.defined()) {
      continue;
    }
    if (t.is_cpu()) {
      cpu = true;
      continue;
    }
    if (!t.is_cuda()) {
      continue;
    }
    if (!device) {
      device = t.device();
    }
    TORCH_CHECK(
        t.device() == *device,
        "zipccl: ",
        op,
        " got CUDA tensors on ",
        *device,
        " and ",
        t.device(),
        "; one call takes tensors of one device");
  }
  TORCH_CHECK(
      !(device && cpu),
      "zipccl: ",
      op,
      " mixes CPU and CUDA tensors; one call takes tensors of one device "
      "(move them all to ",
      *device,
      " or all to the CPU)");
  return device;
}

// ---------------------------------------------------------------------------
// Callbacks and completion

int32_t deviceQuery(uintptr_t done, char* err, int32_t errlen) noexcept {
  if (exiting()) {
    return 0; // the CUDA runtime may be going away: never report
  }
  try {
    return reinterpret_cast<DeviceSync*>(done)->query() ? 1 : 0;
  } catch (const c10::Error& e) {
    writeMessage(err, errlen, e.what_without_backtrace());
  } catch (const std::exception& e) {
    writeMessage(err, errlen, e.what());
  } catch (...) {
    writeMessage(err, errlen, "unknown error querying a CUDA event");
  }
  return -1;
}

void synchronizeDevice(const DeviceState& state) {
  c10::impl::VirtualGuardImpl impl(state.device.type());
  const c10::Stream current = impl.getStream(state.device);
  for (const auto& sync : state.syncs) {
    sync->block(current);
  }
}

namespace {

// Device memory used on the communication stream must not be handed out
// again before the stream is done with it.
void recordOnStream(const at::Tensor& t, const c10::Stream& stream) {
  if (t.defined() && t.is_cuda() && t.has_storage()) {
    c10::impl::VirtualGuardImpl impl(stream.device_type());
    impl.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
}

} // namespace

void postEnqueue(ZipcclWork& work, bool copies) {
  DeviceState& st = *work.device();
  c10::AutoGradMode noGrad(false);
  c10::StreamGuard guard(st.stream);
  // The sources are kept by the work until it completes, which is after
  // the end events: no stream recording needed.
  for (auto& [dst, src] : work.takeCopyBack()) {
    if (copies) {
      dst.copy_(src);
    }
  }
  for (auto& sync : st.syncs) {
    sync->record();
  }
}

void stageWork(ZipcclWork& work, DeviceState& st, const c10::Stream& current) {
  const std::vector<at::Tensor>& kept = work.kept();
  std::vector<OpSpec>& specs = work.ops();
  // The kept tensor a buffer lies in: the largest one holding its start,
  // so a buffer in a view (an in-place all_gather's input inside its
  // output) maps into the copy of the whole.
  auto owner = [&](const zc_buf& b) -> size_t {
    auto* p = static_cast<char*>(b.ptr);
    size_t best = kept.size();
    int64_t bestBytes = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      auto* base = static_cast<char*>(kept[i].data_ptr());
      const int64_t n = kept[i].nbytes();
      if (base != nullptr && p >= base && p < base + n && n > bestBytes) {
        best = i;
        bestBytes = n;
      }
    }
    TORCH_INTERNAL_ASSERT(
        best < kept.size() &&
            p + b.numel * kept[best].element_size() <=
                static_cast<char*>(kept[best].data_ptr()) + bestBytes,
        "zipccl: a buffer of the op lies outside its tensors");
    return best;
  };
  std::vector<char> isIn(kept.size(), 0);
  std::vector<char> isOut(kept.size(), 0);
  for (const OpSpec& spec : specs) {
    for (const zc_buf& b : spec.in) {
      if (b.ptr != nullptr && b.numel > 0) {
        isIn[owner(b)] = 1;
      }
    }
    for (const zc_buf& b : spec.out) {
      if (b.ptr != nullptr && b.numel > 0) {
        isOut[owner(b)] = 1;
      }
    }
  }
  std::vector<at::Tensor> pinned(kept.size());
  {
    c10::AutoGradMode noGrad(false);
    for (size_t i = 0; i < kept.size(); ++i) {
      if (!isIn[i] && !isOut[i]) {
        continue;
      }
      pinned[i] = at::empty(
          kept[i].sizes(),
          kept[i].options().device(c10::kCPU).pinned_memory(true));
      if (isIn[i]) {
        pinned[i].copy_(kept[i], /*non_blocking=*/true);
      }
    }
    // The host op reads the copies: wait for them (not for the whole
    // device).
    c10::Event copied(current.device_type());
    copied.record(current);
    GilRelease nogil;
    copied.synchronize();
  }
  // Computed for every buffer before any is moved (owner() compares the
  // original addresses).
  for (OpSpec& spec : specs) {
    for (auto* bufs : {&spec.in, &spec.out}) {
      for (zc_buf& b : *bufs) {
        if (b.ptr == nullptr || b.numel <= 0) {
          continue;
        }
        const size_t i = owner(b);
        b.ptr = static_cast<char*>(pinned[i].data_ptr()) +
            (static_cast<char*>(b.ptr) - static_cast<char*>(kept[i].data_ptr()));
      }
    }
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    if (isOut[i]) {
      st.stageBack.emplace_back(kept[i], pinned[i]);
    }
    if (pinned[i].defined()) {
      st.pinned.push_back(pinned[i]);
    }
  }
  st.hostWait = true;
  st.syncs = {std::make_shared<DeviceSync>(st.stream)};
}

std::string finalizeDevice(
    DeviceState& st,
    std::vector<std::pair<at::Tensor, at::Tensor>>& copyBack,
    const std::string& error) {
  std::string err = error;
  try {
    c10::AutoGradMode noGrad(false);
    c10::StreamGuard guard(st.stream);
    if (err.empty()) {
      // The work drops its tensors right after this: record them on the
      // stream so their memory outlives the copies.
      for (auto& [dev, host] : st.stageBack) {
        // From pinned memory: asynchronous on the stream; the host
        // allocator keeps the pinned block until the copy is done.
        dev.copy_(host, /*non_blocking=*/true);
        recordOnStream(dev, st.stream);
      }
      for (auto& [dst, src] : copyBack) {
        dst.copy_(src);
        recordOnStream(dst, st.stream);
        recordOnStream(src, st.stream);
      }
    }
  } catch (const std::exception& e) {
    if (err.empty()) {
      err = std::string("zipccl: copying the results back to the GPU failed: ") +
          e.what();
    }
  }
  try {
    for (auto& sync : st.syncs) {
      sync->record();
    }
  } catch (const std::exception& e) {
    if (err.empty()) {
      err = std::string(
                "zipccl: recording the end of the work on its stream failed: ") +
          e.what();
    }
  }
  st.stageBack.clear();
  st.pinned.clear();
  copyBack.clear();
  return err;
}

std::shared_ptr<DeviceState> mergeDeviceStates(
    const std::vector<std::shared_ptr<DeviceState>>& children) {
  std::shared_ptr<DeviceState> out;
  bool host = false;
  for (const auto& child : children) {
    if (!child) {
      host = true;
      continue;
    }
    if (!out) {
      out = std::make_shared<DeviceState>(child->device, child->stream);
    }
    out->hostWait = out->hostWait || child->hostWait;
    out->syncs.insert(
        out->syncs.end(), child->syncs.begin(), child->syncs.end());
  }
  if (out && host) {
    out->hostWait = true;
  }
  return out;
}

// ---------------------------------------------------------------------------
// ZipcclBackend's GPU path

bool ZipcclBackend::launchDevice(
    const c10::intrusive_ptr<ZipcclWork>& work,
    const char* op) {
  const std::optional<c10::Device> device = commonDevice(op, work->kept());
  if (!device) {
    return false;
  }
  const Api& a = api();
  std::vector<OpSpec>& specs = work->ops();
  TORCH_INTERNAL_ASSERT(!specs.empty(), "zipccl: a CUDA work without ops");
  const int peer =
      (specs[0].kind == ZC_OP_SEND || specs[0].kind == ZC_OP_RECV)
      ? specs[0].root
      : -1;
  c10::impl::VirtualGuardImpl impl(device->type());
  // The engine calls NCCL on this thread: its current device must be the
  // tensors'.
  c10::DeviceGuard deviceGuard(*device);
  const c10::Stream current = impl.getStream(*device);
  const c10::Stream stream = deviceStreams_.get(*device, peer);

  // The path, decided by the engine. Whether an op runs through NCCL or
  // through the engine is the same on every rank, so is a work's rule: it
  // goes through the engine whole when any of its ops does, staged when
  // any of them stages here (each rank codes on its GPU or stages alone:
  // the two interoperate).
  bool staged = false;
  bool engine = false;
  char err[2048];
  for (const OpSpec& spec : specs) {
    zc_op z = toZcOp(spec);
    z.flags = ZC_OPF_DEVICE;
    z.device = device->index();
    zc_dev_plan plan{};
    err[0] = '\0';
    int32_t rc = 0;
    {
      // The first plan of a group waits for the other ranks.
      GilRelease nogil;
      rc = a.comm_device_plan(comm_, &z, &plan, err, sizeof(err));
    }
    TORCH_CHECK(
        rc == ZC_OK,
        err[0] != '\0' ? std::string(err)
                       : std::string("zipccl: ") + op +
                " on CUDA tensors: planning failed with error code " +
                std::to_string(rc));
    staged = staged || plan.path == ZC_DEV_STAGED;
    engine = engine || plan.path != ZC_DEV_NCCL;
  }

  // Ordered after the caller's work so far.
  auto state = std::make_shared<DeviceState>(*device, stream);
  c10::Event ready(device->type());
  ready.record(current);
  ready.block(stream);

  if (staged) {
    stageWork(*work, *state, current);
    work->setDevice(std::move(state));
    return false; // launch() submits the host ops over the pinned copies
  }
  if (engine) {
    launchEngine(work, op, *device, current, std::move(state));
    return true;
  }

  bool defer = false;
  {
    std::lock_guard<std::mutex> lock(coalesceMu_);
    defer = coalescing_;
  }
  state->deferred = defer;
  const size_t n = specs.size();
  std::vector<zc_op> zops(n);
  for (size_t i = 0; i < n; ++i) {
    zops[i] = toZcOp(specs[i]);
    zops[i].flags = ZC_OPF_DEVICE | (defer ? ZC_OPF_DEFER : 0);
    zops[i].device = device->index();
    zops[i].stream = static_cast<uint64_t>(
        reinterpret_cast<uintptr_t>(stream.native_handle()));
    auto sync = std::make_shared<DeviceSync>(stream);
    zops[i].done = reinterpret_cast<uintptr_t>(sync.get());
    state->syncs.push_back(std::move(sync));
  }
  work->setDevice(state);
  const std::string failure = submit(work, zops, op, /*releaseGil=*/true);
  if (failure.empty()) {
    if (!defer) {
      postEnqueue(*work, /*copies=*/true);
    }
    return true;
  }
  // The ops enqueued before the failure still complete (once their end
  // events are recorded: now, or when a coalescing block ends); the work
  // then fails.
  if (defer) {
    (void)work->takeCopyBack(); // no results to copy when the block ends
    std::lock_guard<std::mutex> lock(coalesceMu_);
    if (coalescing_) {
      coalesced_.push_back(work);
    }
  } else {
    postEnqueue(*work, /*copies=*/false);
  }
  TORCH_CHECK(false, failure);
}

void ZipcclBackend::launchEngine(
    const c10::intrusive_ptr<ZipcclWork>& work,
    const char* op,
    c10::Device device,
    const c10::Stream& current,
    std::shared_ptr<DeviceState> state) {
  // The engine reads the buffers once the caller's stream has reached this
  // point (it polls this event), runs the ops through its own queue and
  // transport, and has finished every GPU access when it completes them;
  // the end event is then recorded on the communication stream
  // (finalizeDevice), after any copy into non-contiguous outputs.
  auto ready = std::make_shared<DeviceSync>(current);
  ready->record();
  state->ready = ready;
  state->hostWait = true;
  state->syncs = {std::make_shared<DeviceSync>(state->stream)};
  std::vector<OpSpec>& specs = work->ops();
  std::vector<zc_op> zops(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    zops[i] = toZcOp(specs[i]);
    zops[i].flags = ZC_OPF_DEVICE | ZC_OPF_ENGINE;
    zops[i].device = device.index();
    zops[i].done = reinterpret_cast<uintptr_t>(ready.get());
  }
  work->setDevice(std::move(state));
  const std::string failure = submit(work, zops, op, /*releaseGil=*/true);
  TORCH_CHECK(failure.empty(), failure);
}

void ZipcclBackend::flushDevice(
    const std::vector<c10::intrusive_ptr<ZipcclWork>>& children) {
  std::vector<ZipcclWork*> deferred;
  for (const auto& child : children) {
    if (child->device() && child->device()->deferred) {
      deferred.push_back(child.get());
    }
  }
  if (deferred.empty()) {
    return;
  }
  c10::DeviceGuard deviceGuard(deferred.front()->device()->device);
  char err[2048] = {0};
  int32_t rc = 0;
  {
    // Creating NCCL communicators may wait for the other ranks.
    GilRelease nogil;
    rc = api().comm_device_flush(comm_, err, sizeof(err));
  }
  for (ZipcclWork* work : deferred) {
    work->device()->deferred = false;
  }
  // On failure the engine completed every deferred op with the error.
  TORCH_CHECK(
      rc == ZC_OK,
      err[0] != '\0'
          ? std::string(err)
          : "zipccl: enqueueing the coalesced CUDA ops failed (error code " +
              std::to_string(rc) + ")");
  for (ZipcclWork* work : deferred) {
    postEnqueue(*work, /*copies=*/true);
  }
}

} // namespace zipccl
