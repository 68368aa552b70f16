// The shim's side of the GPU path: CUDA tensors, device-generically (c10
// streams, events and guards through c10::impl::VirtualGuardImpl, as
// ProcessGroupGloo handles CUDA; no CUDA headers, so the extension builds
// and loads on machines without CUDA).
//
// A work on CUDA tensors is ordered after the caller's current stream (an
// event recorded there, waited for by the backend's communication stream)
// and runs one of two ways, as the engine decides (zc_comm_device_plan):
//
//  * NCCL path: zc_comm_submit enqueues the op on the communication stream
//    before returning; the shim adds the copies into non-contiguous outputs
//    on that stream, then records the op's end event (DeviceSync). The engine
//    polls the event (deviceQuery) and completes the op when it completed.
//    Work::wait() makes the caller's current stream wait on the end events
//    (no host block), isCompleted() is true once the engine saw them
//    complete, and the tensors stay referenced until then.
//  * Host-staged: inputs copied to pinned host memory (the caller's stream,
//    then a host wait), the op runs on the CPU path over those copies, and
//    the outputs are copied back on the communication stream when it
//    completes; then the end event is recorded. wait() blocks the host until
//    the CPU part is done and makes the caller's stream wait for the copies.
//
// Either way the work's future is a CUDA-aware c10::ivalue::Future,
// completed (with the communication stream current, so its events follow
// the op) when the work completes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "zipccl_abi.h"
#include "zipccl_torch.hpp"

namespace zipccl {

class ZipcclWork;

// The end event of one op on a device stream. Recorded by the shim, polled by
// engine threads through deviceQuery, waited on by Work::wait(): every access
// takes the lock (c10::Event is not thread-safe).
class DeviceSync {
 public:
  explicit DeviceSync(c10::Stream stream);
  // Records the event on the stream (once; later calls are no-ops).
  void record();
  // True once recorded and complete.
  bool query();
  // Makes stream wait for the event (nothing if it was never recorded).
  void block(const c10::Stream& stream);

 private:
  std::mutex mu_;
  c10::Stream stream_;
  c10::Event event_;
  bool recorded_ = false;
};

// What a ZipcclWork on CUDA tensors carries beyond the CPU path's.
struct DeviceState {
  DeviceState(c10::Device device, c10::Stream stream)
      : device(device), stream(stream) {}

  c10::Device device;
  c10::Stream stream; // the communication stream the work runs on
  // wait() blocks the host before the stream wait: staged works (their CPU
  // part), and coalesced works with a staged or host child.
  bool hostWait = false;
  // In a coalescing block: the ops are enqueued (and the end events
  // recorded) by endCoalescing.
  bool deferred = false;
  // NCCL path: one per op; staged: one, recorded after the copies back.
  std::vector<std::shared_ptr<DeviceSync>> syncs;
  // Staged: (device tensor, its pinned copy) to copy back on success.
  std::vector<std::pair<at::Tensor, at::Tensor>> stageBack;
  // Staged: the pinned copies the host op reads and writes.
  std::vector<at::Tensor> pinned;
  // Coded path: the point on the caller's stream after which the engine may
  // read the buffers (it polls it until the work completes).
  std::shared_ptr<DeviceSync> ready;
};

// One communication stream per (device, peer) for each backend: peer -1 for
// collectives, the peer's rank for sends and receives (their NCCL
// communicators are per pair, as in ProcessGroupNCCL), so that traffic to
// one peer does not queue behind another's.
class DeviceStreams {
 public:
  c10::Stream get(c10::Device device, int peer);

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, c10::Stream> streams_;
};

// The device check for a tensor that is not on the CPU: accepts CUDA
// tensors with memory on a device this process sees, rejects the rest with
// a clear message.
void checkDeviceTensor(const char* op, const at::Tensor& t);

// The CUDA device all CPU and CUDA tensors among tensors live on, or nullopt
// when none is on CUDA; throws when CPU and CUDA tensors (or two CUDA
// devices) are mixed. Tensors on other devices are left to
// checkDeviceTensor.
std::optional<c10::Device> commonDevice(
    const char* op,
    const std::vector<at::Tensor>& tensors);

// The engine's end-event query (zc_dev_query_fn).
int32_t deviceQuery(uintptr_t done, char* err, int32_t errlen) noexcept;

// The caller's current stream waits for every end event of state.
void synchronizeDevice(const DeviceState& state);

// Host staging of a work whose tensors are on CUDA: every tensor a buffer of
// the work points into gets a pinned host copy (filled on the caller's
// stream `current` when an input uses it; the host waits for those copies),
// and the buffers are moved onto the copies, so that the work then runs as
// a host work. The outputs go back in finalizeDevice.
void stageWork(ZipcclWork& work, DeviceState& state, const c10::Stream& current);

// The NCCL path's steps once the work's ops are on the stream: the copies
// of results into non-contiguous outputs (skipped when copies is false: the
// work failed), on the same stream, then the end events, which the engine
// polls from then on.
void postEnqueue(ZipcclWork& work, bool copies);

// Runs at a device work's completion, on a completion thread, before the
// work finishes: staged works copy their outputs back (when error is empty)
// and then the copies of results into non-contiguous outputs, on the
// communication stream, and the end event is recorded. Returns the error (a
// failed copy adds one).
std::string finalizeDevice(
    DeviceState& state,
    std::vector<std::pair<at::Tensor, at::Tensor>>& copyBack,
    const std::string& error);

// The device state of a work covering children (endCoalescing): every
// child's end events; a host wait when any child needs one or has no
// device state (a host work). nullptr when no child is on CUDA.
std::shared_ptr<DeviceState> mergeDeviceStates(
    const std::vector<std::shared_ptr<DeviceState>>& children);

} // namespace zipccl
