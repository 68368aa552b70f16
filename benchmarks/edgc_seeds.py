"""EDGC against fixed-rank PowerSGD at equal bytes, over several seeds.

One demo run's comparison is within the fixed ranks' own noise (RESULTS
m4: their losses at one seed spread 1.8 % in no order of the rank), so
this pools the JSONs of `python -m zipccl demo --dp-hook edgc ... --seed
S` runs: per seed, EDGC's final loss, PowerSGD's interpolated at EDGC's
bytes per step (as the demo's check does), plain DDP's, and over the
seeds the mean difference with its standard error.

    python benchmarks/edgc_seeds.py RUN.json [RUN.json ...]
"""

from __future__ import annotations

import json
import math
import shlex
import sys

from zipccl.demo import report


def seed_of(command: str) -> str:
    args = shlex.split(command)
    return args[args.index("--seed") + 1] if "--seed" in args else "0"


def main(paths: list[str]) -> None:
    diffs, vs_plain = [], []
    print(f"{'seed':>4} {'EDGC MB':>8} {'EDGC loss':>9} {'PSGD at EDGC bytes':>18} {'diff':>8} "
          f"{'plain loss':>10} {'EDGC - plain':>12}  fixed ranks (MB/step, loss)")
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        runs = doc["runs"]
        edgc, plain = runs["zipccl-edgc"]["ddp"], runs["zipccl"]["ddp"]
        (eb, el), (_, pl) = report.bytes_and_loss(edgc), report.bytes_and_loss(plain)
        ranks = report.fixed_runs(runs)
        points = [report.bytes_and_loss(s) for _, s in ranks]
        at = report.equal_bytes_loss(points, eb)
        fixed = ", ".join(f"{r} ({b / 1e6:.2f}, {lo:.4f})" for (r, _), (b, lo) in zip(ranks, points))
        vs_plain.append(el - pl)
        if at is None:
            d = "-"
        else:
            diffs.append(el - at)
            d = f"{el - at:+.4f}"
        print(f"{seed_of(doc['command']):>4} {eb / 1e6:8.2f} {el:9.4f} "
              f"{'none' if at is None else f'{at:.4f}':>18} {d:>8} {pl:10.4f} {el - pl:+12.4f}  {fixed}")
    for name, xs in (("EDGC - PowerSGD at equal bytes", diffs), ("EDGC - plain DDP", vs_plain)):
        if len(xs) < 2:
            print(f"{name}: {len(xs)} seed(s), no spread")
            continue
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        print(f"{name}: mean {m:+.4f}, sd {sd:.4f}, standard error {sd / math.sqrt(len(xs)):.4f} "
              f"over {len(xs)} seeds (negative: EDGC lower)")


if __name__ == "__main__":
    main(sys.argv[1:])
