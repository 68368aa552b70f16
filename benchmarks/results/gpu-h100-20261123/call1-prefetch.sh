#!/bin/bash
# Session 11, call 1: base (HEAD 2597768) vs new (tickets one unit ahead,
# cp.async prefetch of the next block). Both built on the development
# machine (nvcc 13.5, sm_90) and carried in .gpu/; built here if they do
# not load. GPU tests on new; benchmarks alternating in two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
export PYTHONPATH=$ROOT/python
BASE=$ROOT/.gpu/base/libzipccl_cuda.so NEW=$ROOT/.gpu/new/libzipccl_cuda.so
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
devs() { python3 -c "import ctypes,sys; print(ctypes.CDLL(sys.argv[1]).zccl_device_count())" "$1" 2>&1; }
echo "devices seen by new: $(devs $NEW), base: $(devs $BASE)"
if [ "$(devs $NEW)" != 1 ] || [ "$(devs $BASE)" != 1 ]; then
  el "carried libraries do not see the GPU: building here"
  export NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  (make -C cuda -j8 ARCHS=90 OUT=/tmp/bnew >$R/make-new.log 2>&1; echo "new rc=$?") & P1=$!
  (make -C .gpu/basesrc/cuda -j8 ARCHS=90 OUT=/tmp/bbase >$R/make-base.log 2>&1; echo "base rc=$?") & P2=$!
  wait $P1 $P2
  BASE=/tmp/bbase/libzipccl_cuda.so NEW=/tmp/bnew/libzipccl_cuda.so
  echo "devices seen by new: $(devs $NEW), base: $(devs $BASE)"
fi
el "go kernel tests (new)"
(cd cuda/gotest && ZIPCCL_CUDA_LIB=$NEW timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-new.log 2>&1; echo "gotest rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)|SKIP' $R/gotest-new.log | head -12)
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu (new)"
ZIPCCL_CUDA_LIB=$NEW timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-new.log 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest-new.log | head -12
for round in 1 2; do for v in BASE NEW; do for dt in bfloat16 float16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -5
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
