"""Times `zipccl.codec.decompress(data, threads=1 or 2)` call by call right
after a `t.clone()` (whose parallel copy leaves torch's OpenMP worker
spinning on the other core) on the demo's float16 activations and
weights: best, median and worst of 60 calls, in ms. Run it with and
without OMP_NUM_THREADS=1.

    python benchmarks/codec_decode_probe.py LABEL   # files of benchmarks/codec_files.py in /tmp/codec
"""

import sys
import time

import numpy as np
import torch

from zipccl import codec


def main(label: str) -> None:
    res = []
    for f in ("demo_activations.fp16", "demo_weights.fp16"):
        t = torch.from_numpy(np.fromfile("/tmp/codec/" + f, dtype=np.float16))
        data = codec.compress(t, "auto", threads=1)
        for th in (1, 2):
            ts = []
            for _ in range(60):
                src = t.clone()
                t0 = time.perf_counter()
                codec.decompress(data, threads=th)
                ts.append(time.perf_counter() - t0)
                del src
            ts.sort()
            res.append(f"{f} t{th} {ts[0] * 1e3:.2f}/{ts[30] * 1e3:.2f}/{ts[-1] * 1e3:.2f}")
    print(label, "  ".join(res))


if __name__ == "__main__":
    main(sys.argv[1])
