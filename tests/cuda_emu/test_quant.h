// test_quant.h: the lossy quantization kernels' tests (test_quant.cpp),
// run by emu_test on tests/cuda_emu/golden/quant.bin.
#pragma once

#include <functional>
#include <string>

#include "../../cuda/zipccl_cuda.h"

struct QuantTestOptions {
  std::string filter;  // run the cases whose name contains it
  bool quick = false;  // aligned buffers only, fewer corruptions
};

// Runs every quantization test on the golden file at path; each result
// goes to check(ok, what).
void run_quant_tests(zccl_ctx* ctx, const std::string& path, const QuantTestOptions& opt,
                     const std::function<void(bool, const std::string&)>& check);
