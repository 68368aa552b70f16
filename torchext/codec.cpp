#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <torch/csrc/utils/pybind.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <Python.h>
#include <sys/mman.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "codec.hpp"
#include "dtypes.hpp"
#include "runtime.hpp"

namespace py = pybind11;

namespace zipccl {
namespace {

// Below this many bytes the GIL is kept: releasing it costs more than the
// codec call.
constexpr int64_t kReleaseGilBytes = int64_t{1} << 16;
// Room for the benchmark's JSON rows (a few KiB in practice).
constexpr int64_t kBenchOutBytes = int64_t{1} << 20;
constexpr int32_t kErrBytes = 4096;
// Outputs from this size up are backed by transparent huge pages (below).
constexpr int64_t kHugeBytes = int64_t{4} << 20;
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// Asks the kernel for transparent huge pages on the 2 MiB-aligned interior of
// a fresh, not yet touched output buffer. The codec writes every byte of its
// output once, so on 4 KiB pages a fresh tensor costs one page fault per
// 4 KiB: measured on all-MiniLM-L6-v2 (45 MB of bf16), those faults took
// longer than the zip3 decode itself (2.5 GB/s into a fresh tensor, 9 GB/s
// into a reused one; 5.3 GB/s with this advice). Only a hint: with THP off
// the call fails harmlessly, and memory already touched is unaffected.
void adviseHugePages(void* p, int64_t nbytes) {
#if defined(MADV_HUGEPAGE)
  if (p == nullptr || nbytes < kHugeBytes) {
    return;
  }
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (start + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t hi = (start + static_cast<uintptr_t>(nbytes)) & ~(kHugePage - 1);
  if (hi > lo) {
    (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)nbytes;
#endif
}

// ZC_ERR_INVALID (bad argument, corrupt or truncated data) becomes a
// ValueError; anything else (a recovered Go panic) a RuntimeError.
[[noreturn]] void throwCodec(int32_t code, const char* msg) {
  std::string text = msg[0] != '\0' ? msg : "zipccl: codec error";
  if (code == ZC_ERR_INVALID) {
    throw py::value_error(text);
  }
  throw std::runtime_error(text + " (code " + std::to_string(code) + ")");
}

// A CPU, strided, contiguous view of t with its negation resolved, and its
// zc dtype. The caller (zipccl.codec) has already produced friendly errors;
// these checks only keep the C++ entry points safe on their own.
at::Tensor plainCpu(const at::Tensor& t, int32_t& dtype) {
  TORCH_CHECK(t.defined(), "zipccl.codec: undefined tensor");
  TORCH_CHECK(
      t.device().is_cpu() && t.layout() == c10::kStrided,
      "zipccl.codec: needs a strided CPU tensor, got ",
      t.device(),
      " ",
      t.layout());
  dtype = zcDtypeOf(t.scalar_type());
  if (dtype < 0) {
    throw py::value_error(
        std::string("zipccl.codec: unsupported dtype ") +
        c10::toString(t.scalar_type()));
  }
  at::Tensor c = t.is_neg() ? t.resolve_neg() : t;
  return c.contiguous();
}

// Holds a contiguous byte buffer of a Python object (bytes, bytearray,
// memoryview, ...) for the duration of a call.
class ByteView {
 public:
  explicit ByteView(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) {
      throw py::error_already_set();
    }
  }
  ~ByteView() {
    PyBuffer_Release(&view_);
  }
  ByteView(const ByteView&) = delete;
  ByteView& operator=(const ByteView&) = delete;

  const void* data() const {
    return view_.buf;
  }
  int64_t size() const {
    return static_cast<int64_t>(view_.len);
  }

 private:
  Py_buffer view_{};
};

// Releases the GIL for its lifetime when the call is large enough to be
// worth it.
class MaybeRelease {
 public:
  explicit MaybeRelease(int64_t bytes) {
    if (bytes >= kReleaseGilBytes) {
      release_.emplace();
    }
  }

 private:
  std::optional<py::gil_scoped_release> release_;
};

// (container bytes, kind used).
py::tuple encode(const at::Tensor& tensor, int32_t kind, int32_t threads) {
  const Api& a = api();
  int32_t dtype = 0;
  at::Tensor c = plainCpu(tensor, dtype);
  const std::vector<int64_t> shape(c.sizes().begin(), c.sizes().end());
  const auto ndim = static_cast<int32_t>(shape.size());
  const int64_t nbytes = c.numel() * static_cast<int64_t>(c.element_size());
  const int64_t cap = a.codec_max_len(dtype, shape.data(), ndim, kind);
  if (cap <= 0) {
    throw py::value_error(
        "zipccl.codec: cannot encode this tensor (kind " + std::to_string(kind) +
        ", " + std::to_string(ndim) + " dimensions)");
  }
  // Encoded straight into a bytes object that is then shrunk in place: no
  // second copy of the output.
  PyObject* obj = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(cap));
  if (obj == nullptr) {
    throw py::error_already_set();
  }
  py::object out = py::reinterpret_steal<py::object>(obj);
  adviseHugePages(PyBytes_AS_STRING(obj), cap);
  char err[kErrBytes] = {0};
  int64_t len = 0;
  int32_t used = 0;
  int32_t rc = 0;
  {
    MaybeRelease nogil(nbytes);
    rc = a.codec_encode_tensor(
        c.data_ptr(),
        nbytes,
        dtype,
        shape.data(),
        ndim,
        kind,
        threads,
        PyBytes_AS_STRING(obj),
        cap,
        &len,
        &used,
        err,
        kErrBytes);
  }
  if (rc != ZC_OK) {
    throwCodec(rc, err);
  }
  TORCH_CHECK(len > 0 && len <= cap, "zipccl.codec: encoder returned length ", len);
  PyObject* raw = out.release().ptr();
  if (_PyBytes_Resize(&raw, static_cast<Py_ssize_t>(len)) != 0) {
    throw py::error_already_set(); // raw was freed and set to NULL
  }
  return py::make_tuple(py::reinterpret_steal<py::bytes>(raw), used);
}

zc_codec_header parseHeader(const Api& a, const ByteView& view) {
  zc_codec_header h{};
  char err[kErrBytes] = {0};
  int32_t rc = a.codec_decode_header(view.data(), view.size(), &h, err, kErrBytes);
  if (rc != ZC_OK) {
    throwCodec(rc, err);
  }
  return h;
}

// (zc dtype, kind, shape, raw bytes, container bytes)
py::tuple header(const py::handle& data) {
  const Api& a = api();
  ByteView view(data);
  zc_codec_header h = parseHeader(a, view);
  std::vector<int64_t> shape(h.shape, h.shape + h.ndim);
  return py::make_tuple(h.dtype, h.kind, shape, h.raw_len, h.total_len);
}

// Decodes the container in view into out (contiguous, CPU, of the header's
// byte length; checked by the callers).
void decodeInto(
    const Api& a,
    const ByteView& view,
    const zc_codec_header& h,
    at::Tensor& out,
    int32_t threads) {
  char err[kErrBytes] = {0};
  int32_t rc = 0;
  {
    MaybeRelease nogil(h.raw_len);
    rc = a.codec_decode_tensor(
        view.data(), view.size(), out.data_ptr(), h.raw_len, threads, err, kErrBytes);
  }
  if (rc != ZC_OK) {
    throwCodec(rc, err);
  }
}

at::ScalarType typeOfHeader(const zc_codec_header& h) {
  auto type = scalarTypeOf(h.dtype);
  if (!type) {
    throw py::value_error(
        "zipccl.codec: the data holds dtype code " + std::to_string(h.dtype) +
        ", which this build cannot represent");
  }
  return *type;
}

at::Tensor decode(const py::handle& data, int32_t threads) {
  const Api& a = api();
  ByteView view(data);
  zc_codec_header h = parseHeader(a, view);
  const at::ScalarType type = typeOfHeader(h);
  const std::vector<int64_t> shape(h.shape, h.shape + h.ndim);
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(type));
  TORCH_CHECK(
      static_cast<int64_t>(out.nbytes()) == h.raw_len,
      "zipccl.codec: tensor of ",
      out.nbytes(),
      " bytes for a frame of ",
      h.raw_len);
  adviseHugePages(out.data_ptr(), h.raw_len);
  decodeInto(a, view, h, out, threads);
  return out;
}

// Decodes into a caller's tensor, which must have the container's dtype and
// element count and be a contiguous CPU tensor (its shape is left as it is).
// Reusing one output tensor saves the page faults of fresh memory.
void decodeIntoTensor(const py::handle& data, at::Tensor out, int32_t threads) {
  const Api& a = api();
  ByteView view(data);
  zc_codec_header h = parseHeader(a, view);
  const at::ScalarType type = typeOfHeader(h);
  if (!out.defined() || !out.device().is_cpu() || out.layout() != c10::kStrided ||
      !out.is_contiguous() || out.is_neg() || out.is_conj()) {
    throw py::value_error("zipccl.codec: out must be a contiguous CPU tensor");
  }
  if (out.scalar_type() != type || out.numel() != h.numel) {
    throw py::value_error(
        std::string("zipccl.codec: out is ") + c10::toString(out.scalar_type()) + " with " +
        std::to_string(out.numel()) + " elements; the data holds " + c10::toString(type) +
        " with " + std::to_string(h.numel));
  }
  TORCH_CHECK(static_cast<int64_t>(out.nbytes()) == h.raw_len, "zipccl.codec: size mismatch");
  decodeInto(a, view, h, out, threads);
}

// (estimated ratio, kind estimated)
py::tuple estimate(const at::Tensor& tensor, int32_t kind) {
  const Api& a = api();
  int32_t dtype = 0;
  at::Tensor c = plainCpu(tensor, dtype);
  const int64_t nbytes = c.numel() * static_cast<int64_t>(c.element_size());
  double ratio = 0;
  int32_t chosen = 0;
  char err[kErrBytes] = {0};
  int32_t rc = a.codec_estimate(
      c.data_ptr(), nbytes, dtype, kind, &ratio, &chosen, err, kErrBytes);
  if (rc != ZC_OK) {
    throwCodec(rc, err);
  }
  return py::make_tuple(ratio, chosen);
}

// The benchmark's rows as a JSON array.
std::string bench(const at::Tensor& tensor, const std::string& options) {
  const Api& a = api();
  int32_t dtype = 0;
  at::Tensor c = plainCpu(tensor, dtype);
  const int64_t nbytes = c.numel() * static_cast<int64_t>(c.element_size());
  std::string out(static_cast<size_t>(kBenchOutBytes), '\0');
  char err[kErrBytes] = {0};
  int64_t n = 0;
  {
    py::gil_scoped_release nogil;
    n = a.codec_bench(
        c.data_ptr(),
        nbytes,
        dtype,
        options.c_str(),
        out.data(),
        kBenchOutBytes,
        err,
        kErrBytes);
  }
  if (n < 0) {
    throwCodec(ZC_ERR_INVALID, err);
  }
  TORCH_CHECK(
      n < kBenchOutBytes, "zipccl.codec: benchmark output of ", n, " bytes is too long");
  out.resize(static_cast<size_t>(n));
  return out;
}

} // namespace

void bindCodec(py::module_& m) {
  m.def(
      "_codec_encode",
      &encode,
      py::arg("tensor"),
      py::arg("kind"),
      py::arg("threads") = 1,
      "tensor, kind, threads -> (tensor container bytes, kind used)");
  m.def(
      "_codec_decode",
      &decode,
      py::arg("data"),
      py::arg("threads") = 1,
      "tensor container (any contiguous buffer), threads -> tensor");
  m.def(
      "_codec_decode_into",
      &decodeIntoTensor,
      py::arg("data"),
      py::arg("out"),
      py::arg("threads") = 1,
      "tensor container, contiguous CPU tensor of its dtype and numel, threads -> None (decoded into out)");
  m.def(
      "_codec_header",
      &header,
      py::arg("data"),
      "tensor container -> (zc dtype, kind, shape, raw bytes, container bytes)");
  m.def(
      "_codec_estimate",
      &estimate,
      py::arg("tensor"),
      py::arg("kind"),
      "tensor -> (estimated ratio, kind estimated)");
  m.def(
      "_codec_bench",
      &bench,
      py::arg("tensor"),
      py::arg("options"),
      "tensor, options JSON -> JSON rows of backend/codec/codecbench");
}

} // namespace zipccl
