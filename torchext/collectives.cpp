// The collectives of c10d::Backend: each checks its arguments, builds a
// work of engine ops and launches it.
#include "args.hpp"
#include "backend.hpp"

namespace zipccl {

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


c10::intrusive_ptr<c10d::Work> ZipcclBackend::barrier(
    const c10d::BarrierOptions& opts) {
  static constexpr const char* kOp = "barrier";
  checkUsable(kOp);
  auto work = makeWork(c10d::OpType::BARRIER, "zipccl:barrier", {}, {});
  work->addOp(ZC_OP_BARRIER, ZC_UINT8, timeoutMs(opts.timeout));
  return launch(work, kOp);
}

} // namespace zipccl
