#!/usr/bin/env bash
# Prints the path of a working nvcc. Looks at $NVCC, PATH, /usr/local/cuda
# and the CUDA wheels in $PYTHON's site-packages; when none is found,
# installs nvcc from PyPI into that environment, pinned to the version of
# the CUDA runtime wheel already there (torch's), so that nvcc, its NVVM
# and crt headers and the runtime headers agree. Progress goes to stderr.
set -euo pipefail
PYTHON=${PYTHON:-python3}

works() { [ -n "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

site_nvcc() {
  "$PYTHON" - <<'EOF' 2>/dev/null || true
import glob, os, site, sys
dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
for d in dirs:
    for pat in ("nvidia/cu*/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc"):
        for p in sorted(glob.glob(os.path.join(d, pat)), reverse=True):
            print(p)
EOF
}

candidates() {
  [ -n "${NVCC:-}" ] && echo "$NVCC"
  command -v nvcc 2>/dev/null || true
  echo /usr/local/cuda/bin/nvcc
  site_nvcc
}

for c in $(candidates); do
  if works "$c"; then echo "$c"; exit 0; fi
done

rt=$("$PYTHON" -m pip show nvidia-cuda-runtime 2>/dev/null | sed -n 's/^Version: //p' || true)
if [ -z "$rt" ]; then
  rt=$("$PYTHON" -m pip show nvidia-cuda-runtime-cu12 2>/dev/null | sed -n 's/^Version: //p' || true)
  [ -n "$rt" ] && pkgs=("nvidia-cuda-nvcc-cu12==$rt")
fi
if [ -n "$rt" ] && [ -z "${pkgs+x}" ]; then
  pkgs=("nvidia-cuda-nvcc==$rt" "nvidia-nvvm==$rt" "nvidia-cuda-crt==$rt")
elif [ -z "$rt" ]; then
  pkgs=(nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl)
fi
echo "find_nvcc: no nvcc found; installing ${pkgs[*]} into $PYTHON's environment" >&2
"$PYTHON" -m pip install -q "${pkgs[@]}" >&2

for c in $(site_nvcc); do
  if works "$c"; then echo "$c"; exit 0; fi
done
echo "find_nvcc: nvcc still not found after installing ${pkgs[*]}" >&2
exit 1
