// Argument checks shared by the c10d ops (declared in args.hpp).
#include "args.hpp"
#include "cuda_path.hpp"
#include "dtypes.hpp"

#include <algorithm>
#include <numeric>

namespace zipccl {

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

int32_t commonDtype(
    const char* op,
    const std::vector<at::Tensor>& tensors,
    std::optional<at::ScalarType> expected) {
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

} // namespace zipccl
