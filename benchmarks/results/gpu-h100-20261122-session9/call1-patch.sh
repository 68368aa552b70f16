#!/bin/bash
# Session 9, call 1: build main and the prepared decode patch (sm_90, the
# machine's nvcc), run the GPU tests on main, bench main, A/B the patch.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1; python3 -c "import torch; print(torch.__version__)"
el build
export NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >"$OUT/build_ext.log" 2>&1; echo "build_ext rc=$?" >>"$OUT/build_ext.log") &
BPID=$!
(make -C cuda -j16 ARCHS=90 OUT=$ROOT/build/cuda >"$OUT/make-main.log" 2>&1; echo "main rc=$?") &
P1=$!
(make -C .gpu/var/cuda -j16 ARCHS=90 OUT=/tmp/varbuild >"$OUT/make-var.log" 2>&1; echo "var rc=$?") &
P2=$!
wait $P1 $P2 $BPID
tail -2 "$OUT/make-main.log" "$OUT/make-var.log"
MAIN=$ROOT/build/cuda/libzipccl_cuda.so VAR=/tmp/varbuild/libzipccl_cuda.so
export PYTHONPATH=$ROOT/python ZIPCCL_CUDA_LIB=$MAIN
el "go kernel tests (main)"
(cd cuda/gotest && timeout 200 "$ROOT/.gpu/gotest.test" -test.count=1 >"$OUT/gotest.log" 2>&1; echo "gotest rc=$?"; tail -3 "$OUT/gotest.log")
el "go kernel tests (var)"
(cd cuda/gotest && ZIPCCL_CUDA_LIB=$VAR timeout 200 "$ROOT/.gpu/gotest.test" -test.count=1 2>&1 | tail -3)
tail -1 "$OUT/build_ext.log"
el "pytest -m gpu (main)"
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >"$OUT/pytest.log" 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/pytest.log" | head -20
for dt in bfloat16 float16 float32; do
  el "bench main $dt"
  timeout 120 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv "$OUT/main-$dt.csv" 2>&1 | tail -7
done
for round in 1 2; do for v in VAR MAIN; do for dt in bfloat16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 64,256,1024 --csv "$OUT/ab-$v-$dt-$round.csv" 2>&1 | tail -4
done; done; done
el done
