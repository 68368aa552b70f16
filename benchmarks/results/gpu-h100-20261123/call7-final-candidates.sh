#!/bin/bash
# Session 11, call 7: T (main at 8629ddb) vs F4 (what was committed after
# it: decode's branch-free escapes for 8- and 16-bit types; encode of 8- and
# 16-bit types at 4 CTAs per SM, float32 at 2; encode's grid sized per
# dtype) vs F3 (the same with 3 CTAs per SM). GPU tests on F4 and F3; all
# five coded dtypes, builds alternating in two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
T=$ROOT/.gpu/T/libzipccl_cuda.so F4=$ROOT/.gpu/F4/libzipccl_cuda.so F3=$ROOT/.gpu/F3/libzipccl_cuda.so
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
for v in F4 F3; do
  el "go kernel tests ($v)"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=${!v} timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-$v.log 2>&1; echo "gotest $v rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-$v.log | head -8)
done
wait $P0; tail -1 $R/build_ext.log
for v in F4 F3; do
  el "pytest -m gpu ($v)"
  ZIPCCL_CUDA_LIB=${!v} timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-$v.log 2>&1; echo "pytest $v rc=$?"
  grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest-$v.log | head -8
done
for round in 1 2; do for v in T F4 F3; do for dt in bfloat16 float16 float32 float8_e4m3fn float8_e5m2; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -5
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
