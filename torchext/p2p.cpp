// Point-to-point: send, recv and recv from any source.
#include "args.hpp"
#include "backend.hpp"

namespace zipccl {

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

} // namespace zipccl
