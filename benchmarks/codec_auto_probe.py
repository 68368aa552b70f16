"""Times `zipccl.codec.compress(t, codec, threads=1)` on the demo's float16
activations (the files of benchmarks/codec_files.py in /tmp/codec), huff2
against auto, on the tensor itself and on a fresh clone of it: best and
median of 100 calls.

    python benchmarks/codec_auto_probe.py LABEL
"""

import sys
import time

import numpy as np
import torch

import zipccl.codec as zc


def main(label: str) -> None:
    t = torch.from_numpy(np.fromfile("/tmp/codec/demo_activations.fp16", dtype=np.float16))
    for codec in ("huff2", "auto", "huff2", "auto"):
        for pre in ("plain", "clone"):
            ts = []
            for _ in range(100):
                src = t.clone() if pre == "clone" else t
                t0 = time.perf_counter()
                zc.compress(src, codec, threads=1)
                ts.append(time.perf_counter() - t0)
            ts.sort()
            print(label, codec, pre, f"min {ts[0] * 1e3:.3f} med {ts[50] * 1e3:.3f} ms "
                  f"-> {t.numel() * 2 / ts[50] / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main(sys.argv[1])
