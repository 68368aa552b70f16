"""Markdown tables from benchmark CSVs, for benchmarks/RESULTS.md.

    python -m zipccl.bench.summarize run1.csv run2.csv run3.csv            # all columns
    python -m zipccl.bench.summarize --goal 1.2 run1.csv run2.csv ...      # the loopback goal table
    python -m zipccl.bench.summarize --modes run.csv                       # gloo, zipccl, zipccl:never

Several CSVs of the same command are repeats: each (backend, op, dtype,
size, ranks: "4", or "2x2" for 2 hosts of 2 ranks) gets the median of their times, so one noisy sweep (a
neighbour compiling during it) does not decide a row. Times are per call,
slowest rank, median over the alternating rounds of each run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from .report import read_csv
from .specs import format_bytes

Key = tuple[str, str, str, int]  # op, dtype, ranks (layout), bytes


def layout(row: dict[str, Any]) -> str:
    """The ranks column: the world size, or hosts x ranks per host when
    hosts hold several ranks (a 2x2 run is no repeat of a 4x1 one)."""
    per_host = str(row.get("ranks_per_host") or 1)
    if "," in per_host:  # hosts of different sizes
        return "+".join(per_host.split(","))
    return f"{row['hosts']}x{per_host}" if int(per_host) > 1 else str(row["world_size"])


def merge(paths: Sequence[str]) -> dict[Key, dict[str, dict[str, Any]]]:
    """{(op, dtype, world, bytes): {backend: row with time_us = median over
    files, times = every file's time}}."""
    cases: dict[Key, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        for row in read_csv(path):
            cases[(row["op"], row["dtype"], layout(row), row["bytes"])][row["backend"]].append(row)
    out: dict[Key, dict[str, dict[str, Any]]] = {}
    for key, backends in cases.items():
        out[key] = {}
        for backend, rows in backends.items():
            merged = dict(rows[0])
            merged["times"] = [r["time_us"] for r in rows]
            merged["time_us"] = statistics.median(merged["times"])
            merged["checks"] = sorted({r["check"] for r in rows})
            out[key][backend] = merged
    return out


def goal_table(cases: dict[Key, dict[str, dict[str, Any]]], goal: float) -> str:
    """zipccl's time over gloo's per size (medians over the files), each
    file's own ratio, and whether the median meets the goal ratio."""
    lines = ["| ranks | op | size | gloo ms | zipccl ms | zipccl/gloo time | each run | within %gx |" % goal,
             "|---:|---|---:|---:|---:|---:|---|:---:|"]
    for (op, dtype, world, size) in sorted(cases, key=lambda k: (k[2], k[0], k[1], k[3])):
        per = cases[(op, dtype, world, size)]
        if "gloo" not in per or "zipccl" not in per:
            continue
        g, z = per["gloo"]["time_us"], per["zipccl"]["time_us"]
        ratio = z / g
        each = " ".join(f"{zt / gt:.2f}" for zt, gt in zip(per["zipccl"]["times"], per["gloo"]["times"]))
        lines.append(f"| {world} | {op} ({dtype}) | {format_bytes(size)} | {g / 1e3:.2f} | {z / 1e3:.2f} | "
                     f"{ratio:.2f} | {each} | {'yes' if ratio <= goal else '**no**'} |")
    return "\n".join(lines)


def full_table(cases: dict[Key, dict[str, dict[str, Any]]]) -> str:
    lines = ["| ranks | op | size | gloo ms | zipccl ms | speedup | each run | gloo busbw GB/s | zipccl busbw GB/s | "
             "gloo wire | zipccl wire | zipccl ratio | check | zipccl choice |",
             "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for (op, dtype, world, size) in sorted(cases, key=lambda k: (k[2], k[1], k[0], k[3])):
        per = cases[(op, dtype, world, size)]
        g, z = per.get("gloo"), per.get("zipccl")
        if not g or not z:
            continue
        # The merged row's busbw belongs to its first file's time; bandwidth
        # scales as 1/time, so rescale it to the median time.
        busbw = [r["busbw_gbps"] * r["times"][0] / r["time_us"] for r in (g, z)]
        lines.append(
            f"| {world} | {op} ({dtype}) | {format_bytes(size)} | "
            f"{g['time_us'] / 1e3:.1f} | {z['time_us'] / 1e3:.1f} | "
            f"**{g['time_us'] / z['time_us']:.2f}x** | "
            f"{' '.join(f'{gt / zt:.2f}' for gt, zt in zip(g['times'], z['times']))} | "
            f"{busbw[0]:.3f} | {busbw[1]:.3f} | "
            f"{_mib(g['wire_bytes'])} ({g['wire_source']}) | {_mib(z['wire_bytes'])} | {float(z['ratio']):.2f} | "
            f"{'/'.join(z['checks'])} | {z.get('choice') or '-'} |")
    return "\n".join(lines)


def _mib(value: Any) -> str:
    try:
        return f"{float(value) / 2**20:.1f} MiB"
    except (TypeError, ValueError):
        return "-"


def modes_table(cases: dict[Key, dict[str, dict[str, Any]]]) -> str:
    """zipccl (its switcher deciding) against gloo and against its own raw
    path (zipccl:never), from runs with --backends gloo,zipccl,zipccl:never."""
    lines = ["| ranks | op | size | gloo ms | zipccl ms | zipccl:never ms | vs gloo | vs own raw | ratio | choice | check |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for (op, dtype, world, size), per in sorted(cases.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        g, z, raw = per.get("gloo"), per.get("zipccl"), per.get("zipccl:never")
        if not (g and z and raw):
            continue
        lines.append(
            f"| {world} | {op} ({dtype}) | {format_bytes(size)} | {g['time_us'] / 1e3:.2f} | {z['time_us'] / 1e3:.2f} | "
            f"{raw['time_us'] / 1e3:.2f} | {g['time_us'] / z['time_us']:.2f}x | {raw['time_us'] / z['time_us']:.2f}x | "
            f"{float(z['ratio']):.2f} | {z.get('choice') or '-'} | {', '.join(sorted(set(z['checks']) | set(raw['checks'])))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zipccl.bench.summarize", description=__doc__.split("\n")[0])
    p.add_argument("csv", nargs="+", help="CSVs written by `python -m zipccl bench collectives`")
    p.add_argument("--goal", type=float, default=None, help="print zipccl/gloo time against this ratio")
    p.add_argument("--modes", action="store_true", help="gloo, zipccl and zipccl:never side by side")
    args = p.parse_args(argv)
    cases = merge(args.csv)
    if args.modes:
        print(modes_table(cases))
    else:
        print(goal_table(cases, args.goal) if args.goal else full_table(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
