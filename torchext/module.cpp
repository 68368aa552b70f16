// zipccl._C: the Python entry points of the shim. Importing it loads nothing
// of Go; _load() does, once.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "backend.hpp"
#include "codec.hpp"
#include "runtime.hpp"

namespace py = pybind11;

namespace zipccl {
namespace {

std::string info() {
  const Api& a = api();
  return readJSON(
      [&](char* buf, int32_t cap) { return a.info(buf, cap); }, "zc_info");
}

ZipcclBackend& zipcclOf(
    const c10::intrusive_ptr<c10d::Backend>& backend,
    const char* what) {
  auto* zb = dynamic_cast<ZipcclBackend*>(backend.get());
  TORCH_CHECK(
      zb != nullptr,
      "zipccl: ",
      what,
      "() needs a zipccl backend, got '",
      backend ? backend->getBackendName() : std::string("None"),
      "'");
  return *zb;
}

std::string stats(const c10::intrusive_ptr<c10d::Backend>& backend) {
  return zipcclOf(backend, "stats").stats();
}

std::string hosts(const c10::intrusive_ptr<c10d::Backend>& backend) {
  return zipcclOf(backend, "topology").hosts();
}

void setLossy(
    const c10::intrusive_ptr<c10d::Backend>& backend,
    const std::string& spec) {
  zipcclOf(backend, "set_lossy").setLossy(spec);
}

} // namespace
} // namespace zipccl

PYBIND11_MODULE(_C, m) {
  using namespace zipccl;
  m.doc() = "zipccl C++ shim (c10d backend over the Go engine)";

  m.def(
      "_load",
      &loadLibrary,
      py::arg("path"),
      "dlopen libzipccl.so once, check its ABI, start the completion threads");
  m.def("_loaded", &libraryLoaded);
  m.def("_forked", &forked);
  m.def("_mark_exiting", &markExiting);
  m.def("_abi_version", []() { return ZC_ABI_VERSION; });
  m.def("_torch_version", []() { return std::string(TORCH_VERSION); });

  m.def(
      "_create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store,
         int rank,
         int size,
         std::chrono::milliseconds timeout,
         const std::string& groupName,
         const std::string& options) {
        return c10::intrusive_ptr<c10d::Backend>(
            c10::make_intrusive<ZipcclBackend>(
                store, rank, size, timeout, groupName, options));
      },
      py::arg("store"),
      py::arg("rank"),
      py::arg("size"),
      py::arg("timeout"),
      py::arg("group_name"),
      py::arg("options") = "",
      py::call_guard<py::gil_scoped_release>());

  m.def("_info", &info, py::call_guard<py::gil_scoped_release>());
  m.def(
      "_stats",
      &stats,
      py::arg("backend"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_hosts",
      &hosts,
      py::arg("backend"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_set_lossy",
      &setLossy,
      py::arg("backend"),
      py::arg("spec"),
      py::call_guard<py::gil_scoped_release>());

  // zipccl.codec: compress/decompress tensors, no process group involved.
  bindCodec(m);

  // Registered so that Python sees the concrete type, and so that torch's
  // new_group() finds perform_nocolor_split() on a split source: zipccl
  // builds every subgroup from the store, so non-members have nothing to do.
  py::class_<
      ZipcclBackend,
      c10d::Backend,
      c10::intrusive_ptr<ZipcclBackend>>(m, "ZipcclBackend")
      .def(
          "perform_nocolor_split",
          [](ZipcclBackend& /*self*/, const py::object& /*device*/) {})
      .def_property_readonly("group_name", &ZipcclBackend::groupName)
      .def("stats", &ZipcclBackend::stats, py::call_guard<py::gil_scoped_release>());
}
