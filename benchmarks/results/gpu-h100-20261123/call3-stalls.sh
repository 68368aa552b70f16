#!/bin/bash
# Session 11, call 3: where base's warps stall (bf16, 256 MiB): Nsight
# Compute stall reasons and per-SASS-instruction stall samples for one
# encode and one plain decode.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/res; mkdir -p $R
exec > >(tee "$OUT/log.txt") 2>&1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1
NCU=/usr/local/cuda/bin/ncu
for k in encode decode; do
  skip=0; [ $k = encode ] && skip=4
  el "ncu base $k"
  ZIPCCL_CUDA_LIB=$ROOT/.gpu/base/libzipccl_cuda.so timeout 240 $NCU --target-processes all -k regex:k_$k --launch-skip $skip --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SchedulerStats --import-source no -o $R/base-$k \
    python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib 256 --iters 1 --warmup 0 >$R/run-$k.txt 2>&1
  echo "rc=$?"
  $NCU -i $R/base-$k.ncu-rep --print-details all --page details >$R/details-$k.txt 2>&1
  $NCU -i $R/base-$k.ncu-rep --page source --print-source sass --csv >$R/sass-$k.csv 2>&1
  grep -iE 'stall' $R/details-$k.txt | head -40
  wc -c $R/sass-$k.csv
done
el done
rm -f $R/*.ncu-rep
tar czf $OUT/res.tgz -C /tmp res
