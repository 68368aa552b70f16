#!/bin/bash
# Session 12, call 3: the build to be committed (`make cuda`, sm_80 + sm_90:
# C, encode's CRC after its count is published, and D's decode change,
# without P) against H (main at 76e5521): GPU tests, all five coded dtypes
# in two alternating rounds, and the profiler's stall summary of its
# encode and decode (bf16, 256 MiB).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
NCU=/usr/local/cuda/bin/ncu
lib() { echo $ROOT/.gpu/$1/libzipccl_cuda.so; }
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
el "go kernel tests (final)"
(cd cuda/gotest && ZIPCCL_CUDA_LIB=$(lib final) timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-final.log 2>&1; echo "gotest final rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-final.log | head -8)
for round in 1 2; do for v in H final; do for dt in bfloat16 float16 float32 float8_e4m3fn float8_e5m2; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=$(lib $v) timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -5
done; done; done
tar czf $OUT/res.tgz -C /tmp res
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu (final)"
ZIPCCL_CUDA_LIB=$(lib final) timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-final.log 2>&1; echo "pytest final rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest-final.log | head -8
for k in encode decode; do
  skip=0; [ $k = encode ] && skip=4
  el "ncu $k (final)"
  ZIPCCL_CUDA_LIB=$(lib final) timeout 200 $NCU --target-processes all -k regex:k_$k --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    --import-source no -o /tmp/final-$k python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib 256 --iters 1 --warmup 0 >$R/ncu-run-$k.txt 2>&1
  $NCU -i /tmp/final-$k.ncu-rep --print-details all --page details >$R/ncu-final-$k.txt 2>&1
  $NCU -i /tmp/final-$k.ncu-rep --page source --print-source sass --csv 2>&1 | gzip -c >$R/sass-final-$k.csv.gz
  grep -E 'Issued Ipc Active|Warp Cycles Per Issued|Issued Instructions  |DRAM Throughput' $R/ncu-final-$k.txt | head -6
done
el done
tar czf $OUT/res.tgz -C /tmp res
