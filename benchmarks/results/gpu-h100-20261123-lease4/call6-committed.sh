#!/bin/bash
# Session 12, call 6: the committed build (`make cuda`, sm_80 + sm_90: C,
# D and L for 8- and 16-bit decode; its sm_90 kernels are instruction for
# instruction those of final (encode, float32 decode) and L (the other
# decodes), compared with cuobjdump -sass): GPU tests and one benchmark
# round of all five coded dtypes.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python ZIPCCL_CUDA_LIB=$ROOT/.gpu/committed/libzipccl_cuda.so
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
el "go kernel tests"
(cd cuda/gotest && timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest.log 2>&1; echo "gotest rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest.log | head -8)
for dt in bfloat16 float16 float32 float8_e4m3fn float8_e5m2; do
  el "bench $dt"
  timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/bench-$dt.csv 2>&1 | tail -5
done
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu"
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest.log 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest.log | head -8
el done
tar czf $OUT/res.tgz -C /tmp res
