// zipccl._C's codec entry points (_codec_encode, _codec_decode,
// _codec_header, _codec_estimate, _codec_bench), used by zipccl.codec: a
// tensor to the Go codec's tensor container and back, through the zc_codec_*
// functions of libzipccl.so. No process group is involved.
#pragma once

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <pybind11/pybind11.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace zipccl {

// Adds the codec functions to the extension module.
void bindCodec(pybind11::module_& m);

} // namespace zipccl
