#!/bin/bash
# The GPU checks on a machine that has a GPU, torch and nvcc but no Go (the
# lent GPU machines), from artifacts built on a machine with Go:
#
#   bash benchmarks/gpu_session.sh prepare   # here: make cuda, build, fill .gpu/
#   bash benchmarks/gpu_session.sh run       # there, from the repository root
#
# `run` builds the torch extension against the machine's torch (or takes
# the one a previous run left in .gpu/ext/), then, each step logged and
# timed, none stopping the others:
#   1. the gpu-tagged Go kernel tests and tests/test_gpu.py (make test-gpu:
#      the kernels, the NCCL, staged and coded paths, a mixed job);
#   2. the kernel benchmark (python -m zipccl bench kernels), bf16; or,
#      when .gpu/ab/ holds builds, those builds side by side (kernel_ab);
#      then the lossy kernels (bench kernels --quant int8,int4,fp8);
#   3. the coded path's benchmark: 2 ranks sharing the GPU, each in its own
#      network namespace behind a shaped link (1 and 10 Gbit/s), bf16
#      64 MiB, GPU-coded zipccl, zipccl staged uncoded and gloo on CUDA
#      tensors side by side.
# Logs and CSVs go to $OUT (default /tmp/zipccl-gpu): log.txt (the summary),
# pytest.log, results.tgz (every log, CSV and JSON) and the built extension,
# stripped, to carry to a second run in .gpu/ext/ (few files: the device
# tool brings back eight). .gpu/ is git-ignored locally (.git/info/exclude)
# and carried to the machine.
#
# EMULATE=1 runs the same steps here, without a GPU, against the CPU
# emulation of the kernel library and with CPU tensors in the benchmark:
# it checks the script, not the GPU.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# iproute2 for a machine image without it (ip, tc; Debian bookworm builds,
# their libraries beside them).
IPROUTE_DEBS="iproute2 libbpf1 libelf1 libmnl0 libbsd0 libmd0 libcap2 libxtables12"

prepare() {
  set -e
  make cuda
  make -C tests/cuda_emu lib
  python3 setup.py -q build_ext --inplace
  mkdir -p .gpu
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  go test -c -tags gpu -o .gpu/gotest.test ./cuda/gotest
  cp build/cuda/libzipccl_cuda.so python/zipccl/libzipccl.so build/cuda_emu/libzipccl_cuda_emu.so .gpu/
  if [ ! -x .gpu/iproute2/sbin/tc ]; then
    local debs
    debs=$(mktemp -d)
    (cd "$debs" && apt-get download $IPROUTE_DEBS >/dev/null)
    rm -rf .gpu/iproute2
    for f in "$debs"/*.deb; do dpkg -x "$f" .gpu/iproute2; done
    rm -rf "$debs" .gpu/iproute2/usr/share
  fi
  ls -la .gpu
  du -sh .gpu
}

log() { echo "== [$(( $(date +%s) - T0 ))s] $*" | tee -a "$W/log.txt"; }

# Everything in $W; $OUT gets the summary, pytest's log and one archive.
pack() {
  cp "$W/log.txt" "$W/pytest.log" "$OUT/" 2>/dev/null
  tar -czf "$OUT/results.tgz" -C "$W" . 2>/dev/null
}

# ip and tc: the machine's, else the carried ones through wrappers.
iproute() {
  if command -v ip >/dev/null && command -v tc >/dev/null; then
    return
  fi
  local lib="$ROOT/.gpu/iproute2/usr/lib/x86_64-linux-gnu:$ROOT/.gpu/iproute2/lib/x86_64-linux-gnu"
  mkdir -p /tmp/zipccl-iproute/bin
  for bin in bin/ip sbin/tc; do # (sbin/ip is a link to /bin/ip)
    local tool=${bin#*/}
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s TC_LIB_DIR=%s exec %s "$@"\n' "$lib" \
      "$ROOT/.gpu/iproute2/usr/lib/x86_64-linux-gnu/tc" "$ROOT/.gpu/iproute2/$bin" >/tmp/zipccl-iproute/bin/$tool
    chmod +x /tmp/zipccl-iproute/bin/$tool
  done
  export PATH=/tmp/zipccl-iproute/bin:$PATH
  log "ip/tc: the carried iproute2 ($(ip -V 2>&1))"
}

build_ext() {
  local prebuilt
  prebuilt=$(ls .gpu/ext/_C*.so 2>/dev/null | head -1)
  if [ -n "$prebuilt" ] && [ -z "${EMULATE:-}" ]; then
    cp "$prebuilt" python/zipccl/ && cp .gpu/libzipccl.so python/zipccl/
    log "extension: carried $prebuilt"
    return
  fi
  ZIPCCL_PREBUILT_LIB=$ROOT/.gpu/libzipccl.so MAX_JOBS=16 python3 setup.py -q build_ext --inplace >"$W/build_ext.log" 2>&1
  local rc=$?
  log "extension built: rc=$rc"
  local so
  so=$(ls python/zipccl/_C*.so 2>/dev/null | head -1)
  [ -n "$so" ] && strip --strip-debug -o "$OUT/$(basename "$so")" "$so" 2>/dev/null
}

# Kernel builds side by side: the one `prepare` built ("new") and every
# .gpu/ab/NAME.so put there by hand (base.so: the one to beat), AB_ROUNDS
# rounds (default 2), the order reversed every other round, then their
# means and ratios.
kernel_ab() {
  local libs=(.gpu/libzipccl_cuda.so .gpu/ab/*.so) round lib
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    local order=("${libs[@]}")
    if [ $((round % 2)) = 0 ]; then
      order=()
      for ((i = ${#libs[@]} - 1; i >= 0; i--)); do order+=("${libs[$i]}"); done
    fi
    for lib in "${order[@]}"; do
      local name=new
      [ "$lib" = .gpu/libzipccl_cuda.so ] || name=$(basename "$lib" .so)
      log "kernel A/B round $round: $name"
      ZIPCCL_CUDA_LIB=$ROOT/$lib timeout 240 python3 -m zipccl bench kernels \
        --dtype "${AB_DTYPES:-bfloat16,float16,float32,float8_e4m3fn}" --sizes-mib "${BENCH_SIZES:-64,256,1024}" \
        --csv "$W/ab-$round-$name.csv" >"$W/ab-$round-$name.log" 2>&1
      log "rc=$?"
      grep -E "differs|NOT|Error|error" "$W/ab-$round-$name.log" | head -5 | tee -a "$W/log.txt"
    done
  done
  python3 benchmarks/kernel_ab.py "$W"/ab-*.csv 2>&1 | tee -a "$W/log.txt" "$W/ab-summary.txt"
}

run() {
  OUT=${OUT:-/tmp/zipccl-gpu}
  W=$(mktemp -d /tmp/zipccl-gpu-work.XXXX)
  mkdir -p "$OUT"
  trap pack EXIT
  T0=$(date +%s)
  export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT/python
  local cudalib=$ROOT/.gpu/libzipccl_cuda.so device=cuda
  if [ -n "${EMULATE:-}" ]; then
    cudalib=$ROOT/.gpu/libzipccl_cuda_emu.so device=cpu
    export ZIPCCL_CUDA_EMU_LIB=$cudalib
  else
    export ZIPCCL_CUDA_LIB=$cudalib
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$W/log.txt"
  fi
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' | tee -a "$W/log.txt"
  iproute
  build_ext

  if [ -z "${ONLY_BENCH:-}" ]; then
  log "go kernel tests"
  (cd cuda/gotest && ZIPCCL_CUDA_LIB=$cudalib "$ROOT/.gpu/gotest.test" -test.v -test.count=1 >"$W/gotest.log" 2>&1)
  log "gotest rc=$?"
  grep -E '^(--- FAIL|FAIL|ok|PASS)' "$W/gotest.log" | tee -a "$W/log.txt"

  log "tests/test_gpu.py"
  timeout 300 python3 -m pytest -v -m gpu tests/test_gpu.py -rfEs -p no:cacheprovider --timeout 150 >"$W/pytest.log" 2>&1
  log "pytest rc=$?"
  grep -E '^(FAILED|ERROR|SKIPPED)|passed|failed' "$W/pytest.log" | tee -a "$W/log.txt"

  if [ -d .gpu/ab ]; then
    kernel_ab
  else
    log "kernel benchmark"
    timeout 120 python3 -m zipccl bench kernels --dtype bfloat16 --sizes-mib "${BENCH_SIZES:-64,256,1024}" \
      --csv "$W/kernels-bfloat16.csv" 2>&1 | tail -6 | tee -a "$W/log.txt"
  fi
  log "lossy kernel benchmark"
  timeout 240 python3 -m zipccl bench kernels --quant int8,int4,fp8 --dtype bfloat16,float32 \
    --sizes-mib "${QUANT_SIZES:-64,256}" --iters 10 --csv "$W/quant.csv" 2>&1 | tail -15 | tee -a "$W/log.txt"

  fi
  local size=${COLL_SIZE:-64M}
  for rate in ${COLL_RATES-1gbit 10gbit}; do
    local ops=all_gather,all_reduce
    [ "$rate" = 1gbit ] && ops=${COLL_OPS:-all_gather,all_reduce,reduce_scatter,all_to_all,broadcast}
    log "collectives: 2 ranks on one GPU, $rate, $ops, $size"
    timeout 300 python3 -m zipccl bench collectives --device "$device" --world-size 2 --link-rate "$rate" \
      --ops "$ops" --dtype bfloat16 --sizes "$size" --backends gloo,zipccl,zipccl:never@staged \
      --rounds 3 --iters 3 --warmup 1 --no-plot --csv "$W/coll-$rate.csv" >"$W/coll-$rate.log" 2>&1
    log "collectives rc=$?"
    grep -vE '^\s*$' "$W/coll-$rate.log" | tail -40 | tee -a "$W/log.txt"
  done
  log "done"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
