// Argument checks and conversions shared by the c10d ops (collectives.cpp,
// p2p.cpp): tensors, dtypes, reduce ops, counts, and the buffers a work hands
// to the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "work.hpp"
#include "zipccl_torch.hpp"

namespace zipccl {

// The single place that decides which devices and layouts the shim
// handles: CPU tensors here, the rest in checkDeviceTensor (cuda_path.cpp).
void checkTensor(const char* op, const at::Tensor& t);

// The zc dtype of type, or an error naming the supported ones.
int32_t zcDtype(const char* op, at::ScalarType type);

// Every tensor checked and of the dtype of the first (or expected); returns
// the zc dtype.
int32_t commonDtype(
    const char* op,
    const std::vector<at::Tensor>& tensors,
    std::optional<at::ScalarType> expected = std::nullopt);

void setRedOp(const char* op, const c10d::ReduceOp& reduceOp, OpSpec& spec);

// kUnsetTimeout (-1) and 0 mean "the communicator's timeout" (0).
int64_t timeoutMs(std::chrono::milliseconds timeout);

void checkCount(
    const char* op,
    const char* what,
    size_t got,
    size_t want,
    const char* why);

// N zc_bufs over a contiguous tensor, the i-th holding counts[i] elements.
void appendChunks(
    std::vector<zc_buf>& bufs,
    ZipcclWork& work,
    const at::Tensor& flat,
    const std::vector<int64_t>& counts);

// alltoall_base element counts per rank of one side: equal rows of dim 0
// when splits is empty, otherwise splits[i] rows.
std::vector<int64_t> splitCounts(
    const char* op,
    const char* side,
    const at::Tensor& t,
    const std::vector<int64_t>& splits,
    int size);

} // namespace zipccl
