#!/bin/bash
# Session 9, call 4: A vs E (A + header parsed once per CTA + reserved bytes in phase A)
# parsed once per CTA, reserved bytes checked in phase A) vs D (C + plain
# decodes at three CTAs per SM). Tests on C and D; benchmarks alternating.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
(make -C .gpu/E/cuda -j16 ARCHS=90 OUT=/tmp/bE >$R/make-E.log 2>&1; echo "E rc=$?") & P1=$!

(make -C .gpu/A/cuda -j16 ARCHS=90 OUT=/tmp/bA >$R/make-A.log 2>&1; echo "A rc=$?") & P3=$!
wait $P0 $P1 $P3
tail -1 $R/build_ext.log
A=/tmp/bA/libzipccl_cuda.so E=/tmp/bE/libzipccl_cuda.so
export PYTHONPATH=$ROOT/python
for v in E; do
  el "go kernel tests ($v)"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=${!v} timeout 200 "$ROOT/.gpu/gotest.test" -test.count=1 >$R/gotest-$v.log 2>&1; echo "gotest $v rc=$?"; grep -E "^(--- FAIL|FAIL|PASS|ok)" $R/gotest-$v.log | head -8)
  el "pytest -m gpu ($v)"
  ZIPCCL_CUDA_LIB=${!v} timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-$v.log 2>&1; echo "pytest rc=$?"
  grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest-$v.log | head -10
done
for round in 1 2; do for v in A E; do for dt in bfloat16 float16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -4
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
