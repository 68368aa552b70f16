#!/bin/bash
# Session 11, call 4: base vs T (encode: window without 64-bit division and
# with full blocks' sample positions computed once, escape count published
# before the CRC combine; look-back state words published with no fence)
# vs D2 (T, and decode's static loads issued before the look-back).
# GPU tests on T and D2; benchmarks alternating in two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
BASE=$ROOT/.gpu/base/libzipccl_cuda.so T=$ROOT/.gpu/T/libzipccl_cuda.so D2=$ROOT/.gpu/D2/libzipccl_cuda.so
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
for v in T D2; do
  el "go kernel tests ($v)"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=${!v} timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-$v.log 2>&1; echo "gotest $v rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-$v.log | head -8)
done
wait $P0; tail -1 $R/build_ext.log
for v in T D2; do
  el "pytest -m gpu ($v)"
  ZIPCCL_CUDA_LIB=${!v} timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-$v.log 2>&1; echo "pytest $v rc=$?"
  grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest-$v.log | head -8
done
for round in 1 2; do for v in BASE T D2; do for dt in bfloat16 float16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -4
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
