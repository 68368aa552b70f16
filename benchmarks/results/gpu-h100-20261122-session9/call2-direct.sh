#!/bin/bash
# Session 9, call 2: base (HEAD) vs A (direct paths, encode loads before the
# window) vs B (loads after it); GPU tests on A; benchmarks alternating.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
(make -C cuda -j16 ARCHS=90 OUT=/tmp/bA >$R/make-A.log 2>&1; echo "A rc=$?") & P1=$!
(make -C .gpu/varB/cuda -j16 ARCHS=90 OUT=/tmp/bB >$R/make-B.log 2>&1; echo "B rc=$?") & P2=$!
(make -C .gpu/base/cuda -j16 ARCHS=90 OUT=/tmp/bBase >$R/make-base.log 2>&1; echo "base rc=$?") & P3=$!
wait $P0 $P1 $P2 $P3
tail -1 $R/build_ext.log
BASE=/tmp/bBase/libzipccl_cuda.so A=/tmp/bA/libzipccl_cuda.so B=/tmp/bB/libzipccl_cuda.so
export PYTHONPATH=$ROOT/python ZIPCCL_CUDA_LIB=$A
for v in A B; do
  el "go kernel tests ($v)"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=${!v} timeout 200 "$ROOT/.gpu/gotest.test" -test.count=1 >$R/gotest-$v.log 2>&1; echo "gotest $v rc=$?"; grep -E "^(--- FAIL|FAIL|PASS|ok)" $R/gotest-$v.log | head -8)
done
el "pytest -m gpu (A)"
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-A.log 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest-A.log | head -20
for dt in bfloat16 float16 float32; do
  el "bench A $dt"
  timeout 120 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/A-$dt.csv 2>&1 | tail -7
done
for round in 1 2; do for v in BASE A B; do for dt in bfloat16 float16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -3
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
