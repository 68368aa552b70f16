// all_reduce of sparse COO tensors (SUM), as ProcessGroupGloo does it: every
// rank's coalesced indices and values are all-gathered (after their counts),
// and every rank sums the ranks' tensors in rank order, so all get the same
// tensor: the one gloo gives. DDP needs it for nn.Embedding(sparse=True).
// The steps run on the calling thread (each waits for the one before), so
// the work is complete when returned.
#include "backend.hpp"

namespace zipccl {

namespace {

// What every rank sends first: its sparse sizes [0:4), its dense sizes
// [4:8) (0 past the last) and its nnz [8], as gloo's metadata.
constexpr int64_t kMetaLen = 9;

at::Tensor metadataOf(const at::Tensor& t) {
  at::Tensor meta = at::zeros({kMetaLen}, at::kLong);
  auto* m = meta.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.sparse_dim(); ++i) {
    m[i] = t.size(i);
  }
  for (int64_t i = 0; i < t.dense_dim(); ++i) {
    m[4 + i] = t.size(t.sparse_dim() + i);
  }
  m[8] = t._nnz();
  return meta;
}

} // namespace

std::vector<at::Tensor> ZipcclBackend::gatherRanks(
    const at::Tensor& input,
    const std::vector<int64_t>& numels) {
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int64_t n : numels) {
    outputs[0].push_back(at::empty({n}, input.options()));
  }
  std::vector<at::Tensor> inputs{input.reshape({-1})};
  auto work = allgather(outputs, inputs, c10d::AllgatherOptions());
  {
    GilRelease nogil;
    work->wait();
  }
  return outputs[0];
}

c10::intrusive_ptr<c10d::Work> ZipcclBackend::allreduceSparse(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  static constexpr const char* kOp = "all_reduce";
  checkUsable(kOp);
  c10::AutoGradMode noGrad(false);
  TORCH_CHECK(
      tensors.size() == 1,
      "zipccl: all_reduce expects 1 tensor (one per process), got ",
      tensors.size());
  TORCH_CHECK(
      opts.reduceOp == c10d::ReduceOp::SUM,
      "zipccl: all_reduce of sparse tensors supports SUM only (as gloo)");
  const at::Tensor& user = tensors[0];
  TORCH_CHECK(
      user.layout() == c10::kSparse,
      "zipccl: all_reduce does not support ",
      user.layout(),
      " tensors (sparse COO and strided only)");
  at::Tensor input = user.coalesce().to(at::kCPU);
  TORCH_CHECK(
      input.sparse_dim() <= 4 && input.dense_dim() <= 4,
      "zipccl: all_reduce of a sparse tensor with ",
      input.sparse_dim(),
      " sparse and ",
      input.dense_dim(),
      " dense dimensions (at most 4 each, as gloo)");
  const int64_t n = size_;

  const std::vector<at::Tensor> metas =
      gatherRanks(metadataOf(input), std::vector<int64_t>(n, kMetaLen));
  const at::Tensor mine = metas[rank_];
  for (int64_t r = 0; r < n; ++r) {
    TORCH_CHECK(
        at::equal(metas[r].narrow(0, 0, 8), mine.narrow(0, 0, 8)),
        "zipccl: all_reduce of sparse tensors: rank ",
        r,
        " has sizes ",
        metas[r].narrow(0, 0, 8),
        ", rank ",
        rank_,
        " has ",
        mine.narrow(0, 0, 8),
        " (sparse dimensions, then dense, 0 past the last)");
  }
  // values are nnz slices of the dense dimensions
  std::vector<int64_t> valueShape{0};
  int64_t slice = 1;
  for (int64_t i = input.sparse_dim(); i < input.dim(); ++i) {
    valueShape.push_back(input.size(i));
    slice *= input.size(i);
  }
  std::vector<int64_t> nnz(n), indexNumel(n), valueNumel(n);
  for (int64_t r = 0; r < n; ++r) {
    nnz[r] = metas[r][8].item<int64_t>();
    indexNumel[r] = nnz[r] * input.sparse_dim();
    valueNumel[r] = nnz[r] * slice;
  }

  const std::vector<at::Tensor> indices =
      gatherRanks(input.indices().contiguous(), indexNumel);
  const std::vector<at::Tensor> values =
      gatherRanks(input.values().contiguous(), valueNumel);

  at::Tensor output;
  for (int64_t r = 0; r < n; ++r) {
    valueShape[0] = nnz[r];
    at::Tensor part = at::sparse_coo_tensor(
        indices[r].reshape({input.sparse_dim(), nnz[r]}),
        values[r].reshape(valueShape),
        input.sizes(),
        input.options());
    output = r == 0 ? part : output + part;
  }
  output = output.coalesce();
  user.copy_(output.to(user.device()));

  auto work = makeWork(
      c10d::OpType::ALLREDUCE, "zipccl:sparse_all_reduce", tensors, tensors);
  work->expectParts(0); // done: complete now
  return work;
}

} // namespace zipccl
