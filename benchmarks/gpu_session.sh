#!/bin/bash
# The GPU checks on a machine that has a GPU, torch and nvcc but no Go (the
# lent GPU machines), from artifacts built on a machine with Go:
#
#   bash benchmarks/gpu_session.sh prepare   # here: make cuda, build, fill .gpu/
#   bash benchmarks/gpu_session.sh run       # there, from the repository root
#
# `run` builds the torch extension against the machine's torch, then runs
# the gpu-tagged Go kernel tests, tests/test_gpu.py and the kernel benchmark
# (the same checks as `make test-gpu` plus `python -m zipccl bench kernels`).
# Logs and CSVs go to $OUT (default /tmp/zipccl-gpu). .gpu/ is git-ignored
# locally (.git/info/exclude) and carried to the machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

prepare() {
  make cuda
  python3 setup.py -q build_ext --inplace
  mkdir -p .gpu
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  go test -c -tags gpu -o .gpu/gotest.test ./cuda/gotest
  cp build/cuda/libzipccl_cuda.so python/zipccl/libzipccl.so .gpu/
  ls -la .gpu
}

run() {
  OUT=${OUT:-/tmp/zipccl-gpu}
  mkdir -p "$OUT"
  export PYTHONUNBUFFERED=1 ZIPCCL_CUDA_LIB=$ROOT/.gpu/libzipccl_cuda.so PYTHONPATH=$ROOT/python
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 python3 setup.py -q build_ext --inplace >"$OUT/build_ext.log" 2>&1
  (cd cuda/gotest && "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >"$OUT/gotest.log" 2>&1) || true
  grep -E '^(--- |PASS|FAIL|ok)' "$OUT/gotest.log" || true
  python3 -m pytest -q -m gpu tests/test_gpu.py -rfEs >"$OUT/pytest.log" 2>&1 || true
  grep -E '^(FAILED|ERROR|SKIPPED)|passed|failed' "$OUT/pytest.log" || true
  for dt in bfloat16 float16 float32; do
    python3 -m zipccl bench kernels --dtype "$dt" --sizes-mib "${BENCH_SIZES:-1,16,64,256,1024}" --csv "$OUT/kernels-$dt.csv" | tail -6
  done
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
