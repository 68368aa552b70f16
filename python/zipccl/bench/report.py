"""Turns the ranks' raw rows into the nccl-tests style table, the CSV and
the plot. Pure functions of the rows, so a CSV can be re-plotted later."""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..netharness.layout import HostLayout
from .specs import OPS, format_bytes

CSV_COLUMNS = [
    "backend", "device", "op", "dtype", "bytes", "count", "redop", "world_size", "hosts", "ranks_per_host", "link",
    "data", "time_us", "algbw_gbps", "busbw_gbps", "wire_bytes", "wire_source", "ratio",
    "nominal_wire_bytes", "nic_bytes", "speedup", "check", "maxdiff", "choice", "codec_us", "iters", "rounds_us",
    "splits",
]


def finish_rows(raw_rows: Iterable[dict[str, Any]], layout: HostLayout, link: str,
                data: str) -> list[dict[str, Any]]:
    """Adds the layout, bandwidths, wire bytes, ratio and speedup.

    algbw/busbw are in GB/s (1e9 bytes/s), as nccl-tests prints them.
    wire_bytes is the total over all ranks per call: zipccl's own count of
    payload bytes it sent (wire_source "zipccl stats"); for other backends,
    which count nothing, what the ranks' NICs sent when each rank has its
    own host (source "nic", headers included, so about 0.1% high), else the
    nominal bytes of a bandwidth-optimal uncompressed algorithm ("nominal").
    ratio is nominal / wire_bytes: 1.0 for uncompressed bandwidth-optimal
    traffic, above 1 when compression saves bytes, below 1 when an algorithm
    sends more than the optimum (a direct exchange for small buffers, or
    gloo's reduce_scatter, which is an all_reduce).
    """
    world_size = layout.world_size
    rows = []
    for raw in raw_rows:
        spec = OPS[raw["op"]]
        size = raw["bytes"]
        t = raw["time_us"] * 1e-6
        algbw = size / t / 1e9 if t > 0 else 0.0
        nominal = raw.get("nominal_wire_bytes") or spec.nominal_wire_bytes(size, world_size)
        if raw.get("zipccl_wire_bytes") is not None:
            wire, source = raw["zipccl_wire_bytes"], "zipccl stats"
        elif raw.get("nic_bytes"):
            wire, source = raw["nic_bytes"], "nic"
        else:
            wire, source = float(nominal), "nominal"
        row = dict(raw)
        row.update(
            world_size=world_size,
            hosts=layout.hosts,
            ranks_per_host=layout.ranks_per_host if layout.equal else layout.sizes_text(),
            link=link,
            data=data,
            algbw_gbps=algbw,
            busbw_gbps=algbw * spec.busbw_factor(world_size),
            wire_bytes=wire,
            wire_source=source,
            nominal_wire_bytes=nominal,
            ratio=nominal / wire if wire > 0 else 1.0,
        )
        rows.append(row)
    by_case: dict[tuple, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        by_case[(row["op"], row["dtype"], row["bytes"])][row["backend"]] = row
    for backends in by_case.values():
        gloo = backends.get("gloo")
        for row in backends.values():
            row["speedup"] = gloo["time_us"] / row["time_us"] if gloo and row["time_us"] > 0 else None
    return rows


def write_csv(rows: Sequence[dict[str, Any]], path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            out = dict(row)
            out["rounds_us"] = " ".join(str(x) for x in row.get("rounds_us", []))
            for key in ("time_us", "algbw_gbps", "busbw_gbps", "ratio", "speedup", "wire_bytes", "nic_bytes",
                        "codec_us"):
                if isinstance(out.get(key), float):
                    out[key] = f"{out[key]:.6g}"
            writer.writerow(out)


def read_csv(path: str) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in ("bytes", "count", "world_size"):
            row[key] = int(row[key])
        # CSVs written before hosts had several ranks: one rank per host;
        # hosts of different sizes: "3,1"
        per_host = row.get("ranks_per_host") or "1"
        row["ranks_per_host"] = per_host if "," in per_host else int(per_host)
        if not row.get("hosts"):
            row["hosts"] = row["world_size"] // int(per_host)
        row["hosts"] = int(row["hosts"])
        for key in ("time_us", "algbw_gbps", "busbw_gbps", "ratio"):
            row[key] = float(row[key])
    return rows


def _tick(v: float) -> str:
    """Compact size labels for the plot's axis: 64K, 1M, 2G."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= scale:
            return f"{v / scale:g}{unit}"
    return f"{v:g}"


def _fmt_bytes_short(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    return format_bytes(n).replace(" ", "")


def _sources(rows: Sequence[dict[str, Any]]) -> str:
    names = {"zipccl stats": "zipccl: its own count", "nic": "others: NIC counters", "nominal": "others: nominal"}
    seen = dict.fromkeys(r.get("wire_source") for r in rows)
    return "; ".join(names.get(s, str(s)) for s in seen if s)


def format_table(rows: Sequence[dict[str, Any]], backends: Sequence[str]) -> str:
    """nccl-tests style: one block per (dtype, op), one line per size, the
    backends side by side, then zipccl's speedup over gloo."""
    by_block: dict[tuple[str, str], dict[int, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        by_block[(row["dtype"], row["op"])][row["bytes"]][row["backend"]] = row
    lines = []
    head1 = f"{'size':>9} {'count':>10} {'type':>8} {'redop':>5}"
    head2 = " " * len(head1)
    for b in backends:
        head1 += f" | {b:^48}"
        head2 += f" | {'time(us)':>10} {'algbw':>6} {'busbw':>6} {'wire':>9} {'ratio':>5} {'check':>6}"
    head1 += " |"
    head2 += " | speedup  (zipccl's choice)"
    for (dtype, op), sizes in by_block.items():
        lines.append("")
        lines.append(f"# {op} ({dtype}); algbw and busbw in GB/s; wire = bytes sent per call by all ranks "
                     f"({_sources(rows)}); ratio = optimal uncompressed bytes / wire")
        lines.append(head1)
        lines.append(head2)
        for size in sorted(sizes):
            per = sizes[size]
            first = next(iter(per.values()))
            line = f"{_fmt_bytes_short(size):>9} {first['count']:>10} {dtype:>8} {first['redop']:>5}"
            for b in backends:
                r = per.get(b)
                if r is None:
                    line += " | " + " " * 48
                    continue
                line += (f" | {r['time_us']:>10.1f} {r['algbw_gbps']:>6.3f} {r['busbw_gbps']:>6.3f}"
                         f" {_fmt_bytes_short(r['wire_bytes']):>9} {r['ratio']:>5.2f} {r['check']:>6}")
            sp = [per[b].get("speedup") for b in backends if b != "gloo" and b in per]
            line += " | " + (" ".join(f"{s:.2f}x" for s in sp if s is not None) or "-")
            choice = per.get("zipccl", {}).get("choice")
            if choice:
                line += f"  ({choice})"
            lines.append(line)
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: str, title: str) -> None:
    """Time against size per op, every backend, log-log; one panel per op
    (and dtype, when there are several)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels = sorted({(r["op"], r["dtype"]) for r in rows}, key=lambda k: (list(OPS).index(k[0]), k[1]))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.8 * nrows), squeeze=False)
    styles = {"gloo": ("tab:blue", "o"), "zipccl": ("tab:red", "s")}
    for ax, (op, dtype) in zip(axes.flat, panels):
        for b in backends:
            pts = sorted((r["bytes"], r["time_us"]) for r in rows
                         if r["op"] == op and r["dtype"] == dtype and r["backend"] == b)
            if not pts:
                continue
            color, marker = styles.get(b, (None, "^"))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=b, markersize=4)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick(v)))
        ax.set_yscale("log")
        ax.set_title(f"{op} ({dtype})")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("time per call (us)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
