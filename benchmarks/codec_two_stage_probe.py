"""Times `zipccl.codec.compress(t, "auto", threads=1 or 2)` call by call
right after a `t.clone()` (as the codec benchmark hands each call a fresh
input) on two of the demo's tensors below two segments, which two threads
encode in two stages (encodeHuff2TwoStage): best, median and worst of 40
calls, in ms. Run it with and without OMP_NUM_THREADS=1 to see torch's
OpenMP worker, which spins after the clone's parallel copy, take the core
the second stage needs.

    python benchmarks/codec_two_stage_probe.py LABEL   # files of benchmarks/codec_files.py in /tmp/codec
"""

import sys
import time

import numpy as np
import torch

from zipccl import codec


def main(label: str) -> None:
    res = []
    for f in ("demo_activations.bf16", "demo_weights.fp16"):
        dt = np.float16 if f.endswith("fp16") else np.int16
        t = torch.from_numpy(np.fromfile("/tmp/codec/" + f, dtype=dt))
        if f.endswith("bf16"):
            t = t.view(torch.bfloat16)
        for th in (1, 2):
            ts = []
            for _ in range(40):
                src = t.clone()
                t0 = time.perf_counter()
                codec.compress(src, "auto", threads=th)
                ts.append(time.perf_counter() - t0)
            ts.sort()
            res.append(f"{f} t{th} {ts[0] * 1e3:.2f}/{ts[20] * 1e3:.2f}/{ts[-1] * 1e3:.2f}")
    print(label, "  ".join(res))


if __name__ == "__main__":
    main(sys.argv[1])
