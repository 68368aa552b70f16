// Package gotest holds the Go side of the CUDA kernels' tests: with the
// build tag gpu it loads libzipccl_cuda.so with dlopen (as the Go engine
// will) and checks the kernels against package codec, package reduce and
// package quant bit for bit:
//
//	make cuda && ZIPCCL_CUDA_LIB=$PWD/build/cuda/libzipccl_cuda.so go test -tags gpu ./cuda/gotest/
//
// (make test-gpu does this). Without a GPU the tests skip with the reason;
// pointed at the CPU emulation of the same C API
// (build/cuda_emu/libzipccl_cuda_emu.so, as make test-cuda-emu does) they
// run on the CPU. Without the tag the package holds only the writer of
// the quantization kernels' golden vectors (quant_golden_test.go) and its
// check that they are up to date.
package gotest
