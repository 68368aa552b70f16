"""Means of `bench kernels` CSVs named ab-ROUND-BUILD.csv (gpu_session.sh's
kernel A/B), per build, dtype and size, with each build's ratio to the
build named "base" and its share of the same run's device copy.

    python3 benchmarks/kernel_ab.py DIR/ab-*.csv
"""

from __future__ import annotations

import csv
import os
import sys
from collections import defaultdict

KERNELS = ("encode_gbs", "decode_gbs", "decode_reduce_gbs")


def main(paths: list[str]) -> int:
    # (build, dtype, size) -> column -> values over rounds
    runs: dict[tuple[str, str, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in (p for p in paths if os.path.exists(p)):
        build = os.path.basename(path)[:-4].split("-", 2)[2]
        with open(path) as f:
            for row in csv.DictReader(f):
                key = (build, row["dtype"], float(row["size_mib"]))
                for col in ("copy_gbs",) + KERNELS:
                    runs[key][col].append(float(row[col]))
    if not runs:
        print("kernel_ab: no CSV rows")
        return 1
    mean = {k: {c: sum(v) / len(v) for c, v in cols.items()} for k, cols in runs.items()}
    rounds = {k: len(cols["copy_gbs"]) for k, cols in runs.items()}
    print("build     dtype            MiB  n  copy   encode (copy%, /base)   decode (copy%, /base)   "
          "dec+red (copy%, /base)")
    for key in sorted(mean, key=lambda k: (k[1], k[2], k[0] != "base", k[0])):
        build, dt, mib = key
        m, base = mean[key], mean.get(("base", dt, mib))
        cells = []
        for col in KERNELS:
            rel = f"{m[col] / base[col]:.2f}" if base else "-"
            cells.append(f"{m[col]:7.1f} ({m[col] / m['copy_gbs']:4.0%}, {rel})")
        print(f"{build:<9} {dt:<15} {mib:>5g} {rounds[key]:>2} {m['copy_gbs']:6.0f}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
