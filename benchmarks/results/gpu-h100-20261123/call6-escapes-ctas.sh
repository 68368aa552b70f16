#!/bin/bash
# Session 11, call 6: T (main at 8629ddb) vs V1 (decode: branch-free
# escapes when a thread has at most 8; encode: __launch_bounds__(256, 3),
# 80 registers) vs V2 (the same decode; encode at 4 CTAs per SM, 64
# registers). GPU tests on V1 and V2; benchmarks alternating in two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
T=$ROOT/.gpu/T/libzipccl_cuda.so V1=$ROOT/.gpu/V1/libzipccl_cuda.so V2=$ROOT/.gpu/V2/libzipccl_cuda.so
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
for v in V1 V2; do
  el "go kernel tests ($v)"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=${!v} timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-$v.log 2>&1; echo "gotest $v rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-$v.log | head -8)
done
wait $P0; tail -1 $R/build_ext.log
for v in V1 V2; do
  el "pytest -m gpu ($v)"
  ZIPCCL_CUDA_LIB=${!v} timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-$v.log 2>&1; echo "pytest $v rc=$?"
  grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest-$v.log | head -8
done
for round in 1 2; do for v in T V1 V2; do for dt in bfloat16 float16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -4
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
