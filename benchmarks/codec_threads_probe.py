"""Times `zipccl.codec.compress` and `decompress` call by call at one and
two threads, the way a Python user calls them (a fresh output each call),
on the raw files of benchmarks/codec_files.py: best, median and worst of
N calls, in ms. Threads that start late show in the median and the worst,
which a best-of-rounds benchmark hides.

    python benchmarks/codec_threads_probe.py LABEL [DIR] [N]
"""

import sys
import time

import numpy as np
import torch

from zipccl import codec

FILES = ("demo_weights.fp16", "demo_weights.bf16", "demo_activations.fp16", "minilm.bf16", "minilm.fp16")


def load(path: str) -> torch.Tensor:
    if path.endswith(".fp16"):
        return torch.from_numpy(np.fromfile(path, dtype=np.float16))
    return torch.from_numpy(np.fromfile(path, dtype=np.int16)).view(torch.bfloat16)


def times(fn, n: int) -> str:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = fn()
        ts.append(time.perf_counter() - t0)
        del r
    ts.sort()
    return f"{ts[0] * 1e3:.2f}/{ts[len(ts) // 2] * 1e3:.2f}/{ts[-1] * 1e3:.2f}"


def main(label: str, d: str, n: int) -> None:
    for f in FILES:
        try:
            t = load(f"{d}/{f}")
        except FileNotFoundError:
            continue
        data = codec.compress(t, "huff2", threads=1)
        row = []
        for th in (1, 2):
            row.append(f"encode t{th} {times(lambda: codec.compress(t, 'huff2', threads=th), n)}")
        for th in (1, 2):
            row.append(f"decode t{th} {times(lambda: codec.decompress(data, threads=th), n)}")
        print(f"{label} {f}: " + "  ".join(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/tmp/codec", int(sys.argv[3]) if len(sys.argv) > 3 else 20)
