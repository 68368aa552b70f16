#!/bin/bash
# Session 12, call 5: L = final (committed as C + D) with decode's direct
# path asking for the block's static record in L2 (prefetch.global.L2, one
# 128-byte line per thread of warps 1..7) while warp 0 runs the look-back,
# so that the loads after it hit L2. Go GPU tests on L; all five coded
# dtypes, final and L alternating in two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python
lib() { echo $ROOT/.gpu/$1/libzipccl_cuda.so; }
el "go kernel tests (L)"
(cd cuda/gotest && ZIPCCL_CUDA_LIB=$(lib L) timeout 200 "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >$R/gotest-L.log 2>&1; echo "gotest L rc=$?"; grep -E '^(--- FAIL|FAIL|PASS|ok)' $R/gotest-L.log | head -8)
for round in 1 2; do for v in final L; do for dt in bfloat16 float16 float32 float8_e4m3fn float8_e5m2; do
  el "AB $v $dt round $round"
  ZIPCCL_CUDA_LIB=$(lib $v) timeout 100 python3 -m zipccl bench kernels --dtype $dt --sizes-mib 16,64,256,1024 --csv $R/ab-$v-$dt-$round.csv 2>&1 | tail -4
done; done; done
el done
tar czf $OUT/res.tgz -C /tmp res
