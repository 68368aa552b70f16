#!/bin/bash
# Session 12, call 2: encode variants against H (main at 76e5521):
#   C:  the direct path's CRC computed after the block's escape count is
#       published (it was computed before coding);
#   P:  a CTA takes its next ticket and issues that block's loads before it
#       finishes the block it coded (look-back, escape copy, index entry);
#   PC: P and C together;
#   D:  PC, and decode reads a block's index entry in one 16-byte load where
#       it is aligned and publishes the escape count right after it.
# GPU tests on C, P, PC and D; all five coded dtypes, builds alternating in two
# rounds; the stall profile of PC's encode (bf16, 256 MiB).
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
for v in C P PC D; do
  el "go kernel tests ($v)"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=$(lib $v) timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-$v.log 2>&1; echo "gotest $v rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-$v.log | head -8)
done
for round in 1 2; do for v in H C P PC D; do for dt in bfloat16 float16 float32 float8_e4m3fn float8_e5m2; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=$(lib $v) timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 16,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -4
done; done; done
tar czf $OUT/res.tgz -C /tmp res
wait $P0; tail -1 $R/build_ext.log
for v in PC D; do
  el "pytest -m gpu ($v)"
  ZIPCCL_CUDA_LIB=$(lib $v) timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >$R/pytest-$v.log 2>&1; echo "pytest $v rc=$?"
  grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" $R/pytest-$v.log | head -8
done
el "ncu encode (PC)"
ZIPCCL_CUDA_LIB=$(lib PC) timeout 200 $NCU --target-processes all -k regex:k_encode --launch-skip 4 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
  --import-source no -o /tmp/pc-encode python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib 256 --iters 1 --warmup 0 >$R/ncu-run-PC.txt 2>&1
$NCU -i /tmp/pc-encode.ncu-rep --print-details all --page details >$R/ncu-PC-encode.txt 2>&1
$NCU -i /tmp/pc-encode.ncu-rep --page source --print-source sass --csv 2>&1 | gzip -c >$R/sass-PC-encode.csv.gz
grep -E 'Issued Ipc Active|Warp Cycles Per Issued|Issued Instructions  |DRAM Throughput' $R/ncu-PC-encode.txt | head -6
el done
tar czf $OUT/res.tgz -C /tmp res
