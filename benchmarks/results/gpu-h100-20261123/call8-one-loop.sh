#!/bin/bash
# Session 11, call 8: F4 (main at e940615) vs G (decode: one element loop
# for every dtype, escapes by select from a window of 8 that a lane
# reloads when a stretch of 8 elements needs more; no second copy of the
# loop). GPU tests on G; builds alternating in two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
F4=$ROOT/.gpu/F4/libzipccl_cuda.so G=$ROOT/.gpu/G/libzipccl_cuda.so
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
el "go kernel tests (G)"
(cd cuda/gotest && ZIPCCL_CUDA_LIB=$G timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-G.log 2>&1; echo "gotest G rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-G.log | head -8)
for round in 1 2; do for v in F4 G; do for dt in bfloat16 float16 float32 float8_e5m2; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=${!v} timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -5
done; done; done
tar czf $OUT/res.tgz -C /tmp res
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu (G)"
ZIPCCL_CUDA_LIB=$G timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-G.log 2>&1; echo "pytest G rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" $R/pytest-G.log | head -8
el done
tar czf $OUT/res.tgz -C /tmp res
