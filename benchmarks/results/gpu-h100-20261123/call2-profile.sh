#!/bin/bash
# Session 11, call 2: Nsight Compute on base and new (bf16, 256 MiB): one
# encode and one plain decode each, with stall reasons and source counters.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
t0=$(date +%s); el() { echo "== [$(($(date +%s) - t0))s] $*"; }
ROOT=$PWD
export PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1
BASE=$ROOT/.gpu/base/libzipccl_cuda.so NEW=$ROOT/.gpu/new/libzipccl_cuda.so
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda-*/bin/ncu /usr/local/NVIDIA-Nsight-Compute*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
[ -z "$NCU" ] && { ls /usr/local/cuda/bin /opt/nvidia 2>&1 | head -60; exit 0; }
SECS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis --section SourceCounters"
for v in BASE NEW; do
  for k in encode decode; do
    skip=0; [ $k = encode ] && skip=4
    el "ncu $v $k"
    ZIPCCL_CUDA_LIB=${!v} timeout 240 $NCU --target-processes all -k regex:k_$k --launch-skip $skip --launch-count 1 $SECS \
      python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib 256 --iters 1 --warmup 0 >$OUT/ncu-$v-$k.txt 2>&1
    echo "rc=$?"; grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per' $OUT/ncu-$v-$k.txt | head -12
  done
done
el done
