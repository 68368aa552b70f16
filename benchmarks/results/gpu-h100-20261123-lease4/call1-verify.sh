#!/bin/bash
# Session 12, call 1: main at 76e5521 (H, built here with
# `make -C cuda ARCHS=90`): GPU tests (its window edit had not run on a
# GPU), the kernel benchmark for all five coded dtypes in two rounds, and
# per-instruction stall profiles of encode and decode (bf16, 256 MiB).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python ZIPCCL_CUDA_LIB=$ROOT/.gpu/H/libzipccl_cuda.so
NCU=/usr/local/cuda/bin/ncu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 timeout 400 python3 setup.py -q build_ext --inplace >$R/build_ext.log 2>&1; echo "build_ext rc=$?" >>$R/build_ext.log) &
P0=$!
el "go kernel tests"
(cd cuda/gotest && timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest.log 2>&1; echo "gotest rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest.log | head -8)
for round in 1 2; do for dt in bfloat16 float16 float32 float8_e4m3fn float8_e5m2; do
  el "bench $dt round $round"
  timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 1,16,64,256,1024 --csv $R/bench-$dt-$round.csv 2>&1 | tail -6
done; done
tar czf $OUT/res.tgz -C /tmp res
wait $P0; tail -1 $R/build_ext.log
el "pytest -m gpu"
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest.log 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest.log | head -8
tar czf $OUT/res.tgz -C /tmp res
for k in encode decode; do
  skip=0; [ $k = encode ] && skip=4
  el "ncu $k"
  timeout 200 $NCU --target-processes all -k regex:k_$k --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section SourceCounters --import-source no -o /tmp/h-$k \
    python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib 256 --iters 1 --warmup 0 >$R/ncu-run-$k.txt 2>&1
  $NCU -i /tmp/h-$k.ncu-rep --print-details all --page details >$R/ncu-$k.txt 2>&1
  $NCU -i /tmp/h-$k.ncu-rep --page source --print-source sass --csv 2>&1 | gzip -c >$R/sass-$k.csv.gz
  grep -E 'Issued Ipc Active|Warp Cycles Per Issued|Issued Instructions  |DRAM Throughput|Registers Per' $R/ncu-$k.txt | head -10
done
el done
tar czf $OUT/res.tgz -C /tmp res
