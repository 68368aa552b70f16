#!/bin/bash
# Session 12, call 8: FB = committed with the raw-fallback kernel (launched
# after every frame encode) leaving at once when no chunk fell back and
# none is empty, instead of first loading 8 KiB of CRC tables in each of
# its CTAs. FB is a `make cuda` build. GPU tests on FB; bf16, f16, f32,
# committed and FB alternating in two rounds (device time left: 242 s).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
lib() { echo $ROOT/.gpu/$1/libzipccl_cuda.so; }
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
el "go kernel tests (FB)"
(cd cuda/gotest && ZIPCCL_CUDA_LIB=$(lib FB) timeout 100 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-FB.log 2>&1; echo "gotest FB rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-FB.log | head -8)
for round in 1 2; do for v in committed FB; do for dt in bfloat16 float16 float32; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=$(lib $v) timeout 60 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -5
done; done; done
tar czf $OUT/res.tgz -C /tmp res
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu (FB)"
ZIPCCL_CUDA_LIB=$(lib FB) timeout 100 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-FB.log 2>&1; echo "pytest FB rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest-FB.log | head -8
el done
tar czf $OUT/res.tgz -C /tmp res
