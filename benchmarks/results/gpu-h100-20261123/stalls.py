"""Where a kernel's warps stall, from an Nsight Compute per-SASS-instruction
export (`ncu -i REP --page source --print-source sass --csv`, gzipped):
the instructions with the most stall samples, and the samples between
consecutive BAR.SYNCs (a sample at a barrier is counted in the region the
barrier opens, so it shows which wait the region's work sat behind).

    python3 stalls.py 3-sass-encode.csv.gz
"""
import csv
import gzip
import sys

rows = list(csv.reader(gzip.open(sys.argv[1], "rt")))
col = {h: i for i, h in enumerate(rows[1])}
data = [r for r in rows[2:] if len(r) > 10]
samples = lambda r: int(r[col["Warp Stall Sampling (All Samples)"]] or 0)  # noqa: E731
executed = lambda r: int(r[col["Instructions Executed"]] or 0)  # noqa: E731
src = lambda r: r[col["Source"]].strip()  # noqa: E731
total = sum(samples(r) for r in data)
print(f"{total} stall samples, {sum(executed(r) for r in data)} warp instructions executed")
print("top instructions (index: samples, share, of which at a barrier):")
for i in sorted(range(len(data)), key=lambda i: -samples(data[i]))[:8]:
    r = data[i]
    print(f"  {i:6d}: {samples(r):6d} {samples(r) / total:6.1%} {int(r[col['stall_barrier']] or 0):6d}  {src(r)[:60]}")
print("regions between barriers with at least 1% of the samples:")
start, acc, ex = 0, 0, 0
for i, r in enumerate(data):
    acc += samples(r)
    ex += executed(r)
    if "BAR.SYNC" in src(r) or i == len(data) - 1:
        if acc >= total / 100:
            print(f"  {start:6d}-{i:6d}: {acc:6d} samples {acc / total:6.1%}, {ex} instructions executed")
        start, acc, ex = i + 1, 0, 0
