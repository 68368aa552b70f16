// ZipcclBackend: the c10d::Backend that turns torch collectives into zc_ops
// for the Go engine.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_path.hpp"
#include "runtime.hpp"
#include "store.hpp"
#include "work.hpp"
#include "zipccl_torch.hpp"

namespace zipccl {

constexpr const char* kBackendName = "zipccl";

class ZipcclBackend : public c10d::Backend {
 public:
  // Creates the Go communicator (zc_comm_create; the GIL is released while
  // it runs). options is the "key=value;key=value" per-group string.
  ZipcclBackend(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      std::chrono::milliseconds timeout,
      std::string groupName,
      std::string options);
  ~ZipcclBackend() override;

  const std::string getBackendName() const override {
    return kBackendName;
  }
  c10::intrusive_ptr<Backend::Options> getBackendOptions() override {
    return backendOptions_;
  }
  bool supportsCoalescing() const override {
    return true;
  }
  bool supportsSplitting() const override {
    return true;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts =
          c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
#if ZIPCCL_HAS_GATHER_INTO_TENSOR
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
#endif
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors,
      int dstRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors,
      int srcRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  // monitor.cpp: rank 0 names the ranks that did not arrive, as gloo's.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks)
      override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<Backend::Options>& opts) override;

  uint64_t getSequenceNumberForGroup() override {
    return seq_.load();
  }

  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  // JSON from zc_comm_stats.
  std::string stats();
  // hosts.cpp: JSON from zc_comm_hosts (the group's ranks by host).
  std::string hosts();
  // lossy.cpp: the group's lossy policy (zc_comm_set_lossy).
  void setLossy(const std::string& spec);
  const std::string& groupName() const {
    return groupName_;
  }

 private:
  // Throws unless collectives may run: not forked, not shut down.
  void checkUsable(const char* op) const;
  // Submits every op of work (tickets tracked before each submit), records
  // it for endCoalescing, and returns it. Works on CUDA tensors go through
  // launchDevice first. Throws the Go message when a submit is rejected.
  c10::intrusive_ptr<c10d::Work> launch(
      const c10::intrusive_ptr<ZipcclWork>& work,
      const char* op);
  // Submits zops, the ops of work (expectParts, then each ticket tracked
  // before its submit). On a rejection the ops not submitted are abandoned
  // (the work fails once the submitted ones completed) and the message is
  // returned; empty when all were accepted.
  std::string submit(
      const c10::intrusive_ptr<ZipcclWork>& work,
      std::vector<zc_op>& zops,
      const char* op,
      bool releaseGil);
  // The GPU path (cuda_path.cpp). For a work whose tensors are on CUDA: asks
  // the engine for the path (zc_comm_device_plan) and orders the work after
  // the caller's current stream; on the NCCL path submits its ops as device
  // ops on a communication stream and returns true; on the coded path
  // submits them as engine ops (launchEngine) and returns true;
  // host-staged, moves its buffers onto pinned host copies and returns
  // false, for launch() to submit it as a host work. Returns false for a
  // host work. Throws on mixed devices and on planning or submit errors.
  bool launchDevice(
      const c10::intrusive_ptr<ZipcclWork>& work,
      const char* op);
  void launchEngine(
      const c10::intrusive_ptr<ZipcclWork>& work,
      const char* op,
      c10::Device device,
      const c10::Stream& current,
      std::shared_ptr<DeviceState> state);
  // endCoalescing: enqueues the CUDA ops deferred in the block as one NCCL
  // group (zc_comm_device_flush), then records their end events.
  void flushDevice(const std::vector<c10::intrusive_ptr<ZipcclWork>>& children);
  c10::intrusive_ptr<ZipcclWork> makeWork(
      c10d::OpType type,
      const char* title,
      const std::vector<at::Tensor>& inputs,
      std::vector<at::Tensor> outputs);
  int32_t checkRoot(const char* op, int64_t root) const;
  // One zc_op each, shared by the single and the *_coalesced calls.
  void addAllgather(
      ZipcclWork& work,
      const char* op,
      const std::vector<at::Tensor>& outputs,
      const at::Tensor& input,
      const c10d::AllgatherOptions& opts);
  void addAllgatherBase(
      ZipcclWork& work,
      const char* op,
      const at::Tensor& output,
      const at::Tensor& input,
      const c10d::AllgatherOptions& opts);
  void addReduceScatterBase(
      ZipcclWork& work,
      const char* op,
      const at::Tensor& output,
      const at::Tensor& input,
      const c10d::ReduceScatterOptions& opts);
  // sparse.cpp: all_reduce of sparse COO tensors, as gloo's; and the
  // all_gather of one tensor per rank of the given sizes it is made of,
  // waited for.
  c10::intrusive_ptr<c10d::Work> allreduceSparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts);
  std::vector<at::Tensor> gatherRanks(
      const at::Tensor& input,
      const std::vector<int64_t>& numels);
  // Releases the communicator: zc_comm_destroy, then the store handle.
  void destroyComm();

  uintptr_t comm_ = 0;
  StoreHandle* store_ = nullptr;
  std::string groupName_;
  std::string options_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<Backend::Options> backendOptions_;
  std::atomic<bool> closed_{false};
  std::mutex commMu_; // serializes shutdown/abort/destroy
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> splits_{0};

  std::mutex coalesceMu_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<ZipcclWork>> coalesced_;

  DeviceStreams deviceStreams_;
};

} // namespace zipccl
