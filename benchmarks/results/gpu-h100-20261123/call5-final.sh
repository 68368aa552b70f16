#!/bin/bash
# Session 11, call 5: the committed build (`make cuda`, sm_80 + sm_90, built
# on the development machine): GPU tests, the kernel benchmark for three
# dtypes, and the profiler's stall summary for bf16 at 256 MiB.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python ZIPCCL_CUDA_LIB=$ROOT/.gpu/final/libzipccl_cuda.so
NCU=/usr/local/cuda/bin/ncu
$NCU --version | tail -1
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
el "go kernel tests"
(cd cuda/gotest && timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest.log 2>&1; echo "gotest rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest.log | head -8)
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu"
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest.log 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest.log | head -8
for dt in bfloat16 float16 float32; do
  el "bench $dt"
  timeout 120 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/final-$dt.csv 2>&1 | tail -6
done
for k in encode decode; do
  skip=0; [ $k = encode ] && skip=4
  el "ncu $k"
  timeout 200 $NCU --target-processes all -k regex:k_$k --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
    --section SourceCounters --import-source no -o /tmp/final-$k \
    python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib 256 --iters 1 --warmup 0 >$R/ncu-run-$k.txt 2>&1
  $NCU -i /tmp/final-$k.ncu-rep --print-details all --page details >$R/ncu-final-$k.txt 2>&1
  $NCU -i /tmp/final-$k.ncu-rep --page source --print-source sass --csv >/tmp/sass-$k.csv 2>&1
  gzip -c /tmp/sass-$k.csv >$R/sass-final-$k.csv.gz
  grep -E 'Issued Ipc Active|Warp Cycles Per Issued|Issued Instructions  |DRAM Throughput|Stall (Barrier|Short|Wait|Long)' $R/ncu-final-$k.txt | head -10
done
el done
tar czf $OUT/res.tgz -C /tmp res
