"""Where zipccl's native pieces are found on disk."""

from __future__ import annotations

import os


def cuda_library() -> str | None:
    """The CUDA kernel library, libzipccl_cuda.so: $ZIPCCL_CUDA_LIB, else the
    copy next to the package, else the repository's build/cuda/ (make cuda);
    None when there is none."""
    env = os.environ.get("ZIPCCL_CUDA_LIB")
    if env:
        return env if os.path.exists(env) else None
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "libzipccl_cuda.so"),
                 os.path.join(here, "..", "..", "build", "cuda", "libzipccl_cuda.so")):
        if os.path.exists(cand):
            return os.path.normpath(cand)
    return None
