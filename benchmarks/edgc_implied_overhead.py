"""What the fixed ranks of a `python -m zipccl demo --dp-hook edgc` run say
EDGC's measured-step correction should have been (benchmarks/RESULTS.md
(m6)): for each fixed rank r, (its step - plain DDP's step) - (max_rank's
model at r - the model's raw exchange), with the link and compression fit
the EDGC run recorded, and the r_max that overhead gives; beside them, the
overhead the hook measured and the median steps of plain DDP's warm-up
(steps 2..9) and of the rest.

    python benchmarks/edgc_implied_overhead.py benchmarks/results/demo-dp-hook-edgc-1gbit-m6*.json
"""

from __future__ import annotations

import json
import statistics
import sys

from zipccl.hooks import exchange_seconds, max_rank

# The demo GPT's weight matrices (d_model 192, 4 layers, a 128-byte
# vocabulary's embedding and head), as in tests/test_edgc.py's
# test_max_rank_counts_matrices_sent_raw.
DEMO_SHAPES = ([(576, 192)] * 4 + [(192, 192)] * 4 + [(768, 192)] * 4 + [(192, 768)] * 4 + [(256, 192)] * 2
               + [(128, 192)])


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        runs = {k: v["ddp"] for k, v in d["runs"].items()}
        link = runs["zipccl-edgc"]["link"]
        model = dict(world_size=d["world_size"], latency_s=link["latency_s"], bytes_per_s=link["bytes_per_s"],
                     compress_s_per_rank=link["compress_s_per_rank"], compress_s_fixed=link["compress_s_fixed"])
        plain = runs["zipccl"]["median_step_s"]
        raw = exchange_seconds(DEMO_SHAPES, 0, **model)
        times = runs["zipccl"]["times"]
        print(f"{path}: plain DDP warm-up steps 2..9 median {statistics.median(times[2:10]) * 1e3:.1f} ms, "
              f"steps 10.. {statistics.median(times[10:]) * 1e3:.1f} ms; hook measured "
              + (f"{link['step_overhead_s'] * 1e3:+.1f} ms" if "step_overhead_s" in link else "nothing"))
        for key in sorted(k for k in runs if k.startswith("zipccl-fixed-")):
            r = int(key.rsplit("-", 1)[1])
            implied = (runs[key]["median_step_s"] - plain) - (exchange_seconds(DEMO_SHAPES, r, **model) - raw)
            print(f"  rank {r}: implied overhead {implied * 1e3:.1f} ms, r_max "
                  f"{max_rank(DEMO_SHAPES, step_overhead_s=implied, **model)}")


if __name__ == "__main__":
    main(sys.argv[1:])
