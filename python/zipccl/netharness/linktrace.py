"""What each shaped link carried, every few milliseconds, and where it idled.

A benchmark's time per call says how long a collective took, not why. This
samples the byte counters of every host's link (its NIC: one per rank unless
hosts have several ranks) while ranks run (cheap sysfs reads from one thread
of the launcher, which is in the root namespace), and splits the trace into
busy periods (one per timed call when calls are apart), each summarised as:

* ``head_ms``: from the first link's start until every host sends at more
  than half the link rate (ranks starting at different times);
* ``tail_ms``: from the last moment every host sent at more than half the
  rate to the period's end (some links idle while others finish);
* ``mid_util``: the mean uplink use in between, as a share of the link rate.

    with Network(4, LinkSpec.parse("1gbit")) as net, LinkTrace(net, "trace.csv"):
        launch_ranks(net, ...)
    python -m zipccl.netharness.linktrace trace.csv --rate 1gbit
"""

from __future__ import annotations

import argparse
import csv
import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Sequence

from .shaping import parse_rate
from .topology import Network


class LinkTrace:
    """Samples, every ``interval_s``, the bytes each host has sent (its
    uplink: what the bridge-side veth end received) and received, and writes
    them to ``path`` as CSV on exit: ``t_s``, then ``up<h>``, ``down<h>``
    per host, cumulative bytes. On loopback there are no links, and nothing
    is written."""

    def __init__(self, net: Network, path: str, interval_s: float = 0.002):
        self.path = path
        self.interval_s = interval_s
        self.rows: list[list[float]] = []
        self._devs = [net.host_end_of_host(h) for h in range(net.hosts)]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return all(self._devs)

    def __enter__(self) -> "LinkTrace":
        if self.active:
            self._thread = threading.Thread(target=self._run, name="linktrace", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self.write()

    def _run(self) -> None:
        files = []
        try:
            for dev in self._devs:
                base = f"/sys/class/net/{dev}/statistics"
                # rx of the bridge-side end is what the host sent
                files.append((open(os.path.join(base, "rx_bytes")), open(os.path.join(base, "tx_bytes"))))
            t0 = time.monotonic()
            while not self._stop.is_set():
                row = [time.monotonic() - t0]
                for up, down in files:
                    up.seek(0)
                    down.seek(0)
                    row += [int(up.read()), int(down.read())]
                self.rows.append(row)
                self._stop.wait(self.interval_s)
        except (OSError, ValueError):
            pass  # a link went away: the network is being torn down
        finally:
            for pair in files:
                for f in pair:
                    f.close()

    def write(self) -> None:
        n = len(self._devs)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t_s"] + [f"{d}{h}" for h in range(n) for d in ("up", "down")])
            for row in self.rows:
                w.writerow([f"{row[0]:.6f}"] + [str(int(v)) for v in row[1:]])


def read_trace(path: str) -> tuple[list[float], list[list[int]]]:
    """Times and, per host, cumulative uplink bytes."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        ups = [i for i, h in enumerate(head) if h.startswith("up")]
        ts: list[float] = []
        up: list[list[int]] = [[] for _ in ups]
        for row in r:
            ts.append(float(row[0]))
            for k, i in enumerate(ups):
                up[k].append(int(row[i]))
    return ts, up


@dataclass
class BusyPeriod:
    start_s: float
    ms: float
    mb_per_link: float  # mean over the hosts' links, 1e6 bytes
    head_ms: float
    tail_ms: float
    mid_util: float

    def describe(self) -> str:
        return (f"{self.start_s:8.3f} s  {self.ms:6.0f} ms  {self.mb_per_link:6.1f} MB per link  "
                f"head {self.head_ms:3.0f} ms  tail {self.tail_ms:3.0f} ms  mid use {self.mid_util:.3f}")


def busy_periods(ts: Sequence[float], up: Sequence[Sequence[int]], rate_bps: float,
                 bin_s: float = 0.005, min_ms: float = 50.0) -> list[BusyPeriod]:
    """Splits a trace into periods in which some host sends (more than 5% of
    the link rate per bin) and summarises each (see the module doc)."""
    if not ts or not up:
        return []
    full = rate_bps / 8 * bin_s  # bytes one link carries in a bin
    bins: list[list[float]] = []
    j = 0
    t = ts[0]
    while t + bin_s <= ts[-1]:
        # counters at the last sample at or before t and t + bin_s
        while j + 1 < len(ts) and ts[j + 1] <= t:
            j += 1
        k = j
        while k + 1 < len(ts) and ts[k + 1] <= t + bin_s:
            k += 1
        bins.append([(c[k] - c[j]) / full for c in up])
        t += bin_s
    # A link's counter moves in whole GSO packets (64 KiB: every 5 ms at
    # 100 Mbit/s), so one idle bin does not end a period.
    busy = [max(b) > 0.05 for b in bins]
    periods: list[BusyPeriod] = []
    start = None
    for i in range(len(bins) + 1):
        if i < len(bins) and busy[i]:
            if start is None:
                start = i
            continue
        if start is None or (i + 1 < len(bins) and busy[i + 1]):
            continue
        sel = bins[start:i]
        if len(sel) * bin_s * 1000 >= min_ms:
            periods.append(_summarise(ts[0] + start * bin_s, sel, bin_s, full))
        start = None
    return periods


def _summarise(start_s: float, sel: list[list[float]], bin_s: float, full: float) -> BusyPeriod:
    n = len(sel[0])
    all_on = [i for i, b in enumerate(sel) if min(b) > 0.5]
    lo, hi = (all_on[0], all_on[-1]) if all_on else (0, len(sel) - 1)
    mid = sel[lo:hi + 1]
    return BusyPeriod(
        start_s=start_s,
        ms=len(sel) * bin_s * 1000,
        mb_per_link=sum(sum(b) for b in sel) * full / n / 1e6,
        head_ms=lo * bin_s * 1000,
        tail_ms=(len(sel) - 1 - hi) * bin_s * 1000,
        mid_util=sum(sum(b) for b in mid) / (n * len(mid)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zipccl.netharness.linktrace",
                                description="Summarise a link trace (bench collectives --link-trace) "
                                            "as busy periods: one per timed call, when calls are apart.")
    p.add_argument("trace", help="CSV written by --link-trace")
    p.add_argument("--rate", required=True, help="the links' rate, e.g. 1gbit")
    p.add_argument("--bin-ms", type=float, default=5.0, help="bin width (default 5 ms)")
    p.add_argument("--min-ms", type=float, default=50.0, help="shortest period shown (default 50 ms)")
    args = p.parse_args(argv)
    ts, up = read_trace(args.trace)
    for period in busy_periods(ts, up, parse_rate(args.rate), args.bin_ms / 1000, args.min_ms):
        print(period.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
