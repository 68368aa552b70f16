// The torch headers the shim uses, and the version switches.
//
// Torch's headers are not clean under -Wextra (unused parameters in inline
// virtuals), so they are included here, once, with that warning silenced;
// the shim's own code is compiled with -Wall -Wextra and stays warning-free.
#pragma once

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/exception.h>
#include <torch/version.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#define ZIPCCL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// torch 2.11 is the oldest release the shim is built against. Everything the
// shim overrides unconditionally exists there: the old collective names
// (_allgather_base, _reduce_scatter_base, alltoall_base,
// allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced),
// start/endCoalescing, supportsCoalescing, supportsSplitting, split,
// getBackendOptions (Options with group_name), setTimeout, abort, shutdown,
// and Store::clone.
#if !ZIPCCL_TORCH_AT_LEAST(2, 11)
#error "zipccl needs torch >= 2.11"
#endif

// gather_into_tensor arrived after 2.11, with the canonical *_single names
// and their forwarding aliases (the generation of Backend.hpp that also
// defines the C10D_BACKEND_HAS_* feature macros).
#if ZIPCCL_TORCH_AT_LEAST(2, 15) || defined(C10D_BACKEND_HAS_RECONFIGURE)
#define ZIPCCL_HAS_GATHER_INTO_TENSOR 1
#else
#define ZIPCCL_HAS_GATHER_INTO_TENSOR 0
#endif

namespace zipccl {
// OpTypes of the *_tensor_coalesced calls; 2.11 has only the generic one.
#if ZIPCCL_TORCH_AT_LEAST(2, 15)
constexpr c10d::OpType kOpAllgatherIntoTensorCoalesced =
    c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED;
constexpr c10d::OpType kOpReduceScatterTensorCoalesced =
    c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED;
#else
constexpr c10d::OpType kOpAllgatherIntoTensorCoalesced =
    c10d::OpType::COALESCED;
constexpr c10d::OpType kOpReduceScatterTensorCoalesced =
    c10d::OpType::COALESCED;
#endif
} // namespace zipccl
