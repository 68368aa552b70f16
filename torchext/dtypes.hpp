// The element types the engine carries: torch's and the C ABI's ZC_* codes,
// one table for both directions.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "zipccl_abi.h"
#include "zipccl_torch.hpp"

namespace zipccl {

inline constexpr std::pair<at::ScalarType, int32_t> kDtypes[] = {
    {at::kFloat, ZC_FLOAT32},
    {at::kDouble, ZC_FLOAT64},
    {at::kBFloat16, ZC_BFLOAT16},
    {at::kHalf, ZC_FLOAT16},
    {at::kChar, ZC_INT8},
    {at::kByte, ZC_UINT8},
    {at::kShort, ZC_INT16},
    {at::kInt, ZC_INT32},
    {at::kLong, ZC_INT64},
    {at::kBool, ZC_BOOL},
    {at::kFloat8_e4m3fn, ZC_FLOAT8_E4M3FN},
    {at::kFloat8_e5m2, ZC_FLOAT8_E5M2},
};

// The ZC_* code of a torch dtype, or -1 when the engine cannot carry it.
inline int32_t zcDtypeOf(at::ScalarType type) {
  for (const auto& [t, zc] : kDtypes) {
    if (t == type) {
      return zc;
    }
  }
  return -1;
}

// The torch dtype of a ZC_* code, or nullopt for an unknown code.
inline std::optional<at::ScalarType> scalarTypeOf(int32_t zc) {
  for (const auto& [t, code] : kDtypes) {
    if (code == zc) {
      return t;
    }
  }
  return std::nullopt;
}

} // namespace zipccl
