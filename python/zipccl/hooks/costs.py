"""What EDGC measures of its own costs: its compression's time, fitted as
max_rank's T_c = b + k r, and its steps' times, which correct max_rank's
model by what compressed steps actually cost.

Why the steps: max_rank's model counts the compression and the bytes, not
the rest of what a compressed step costs (the entropy sampling, three
all-reduces for one, the wait for P before Q, the backward pass's share of
the cores), and on a fast link that rest decides: at 1 Gbit/s on 2 cores
the model allowed rank 67 where no rank paid (benchmarks/RESULTS.md (m5)).
A step is timed from the first bucket's hook call to the last future's
completion (the part of a step the exchange can lengthen), on CPU
tensors only: a CUDA future can complete before its device work. The
overhead is the median, over the latest compressed steps, of (their time -
the median warm-up step's) - (the model's time at their rank - its raw
time).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

from .controller import exchange_seconds
from .powersgd import orthonormalize

# Step times kept: the latest this many, raw and compressed.
SPANS_KEPT = 64


def timing_rank(r_min: int) -> int:
    """The second rank EDGCState times its compression at: far enough from
    r_min for the difference to stand out of the timing's noise."""
    return max(2 * r_min, 64)


def fit_compression_time(r_lo: int, seconds_lo: float, r_hi: int, seconds_hi: float) -> tuple[float, float]:
    """(b, k) of T_c(r) = b + k r through two timings, neither negative: a
    k of 0 where the timing at r_hi came out no slower."""
    k = max(0.0, (seconds_hi - seconds_lo) / (r_hi - r_lo))
    return max(0.0, seconds_lo - k * r_lo), k


def time_compression(mats: list[torch.Tensor], ranks: Sequence[int], seed: int) -> list[float]:
    """Seconds to compress and decompress mats (P = MQ, the
    orthonormalisations, Q = M^T P, PQ^T; no all-reduce) at each of ranks,
    each the fastest of three, the ranks interleaved so a busy moment does
    not bend a fit."""
    cuda = any(g.is_cuda for g in mats)
    # Random Q, as the hook's: the QR of a matrix of ones (rank 1) is
    # far slower on CPU, and inflated r_max's compression time
    # (benchmarks/RESULTS.md (m5)).
    gen = torch.Generator().manual_seed(seed)
    qs = {(n, cols, rank): torch.randn(cols, min(n, cols, rank), generator=gen).to(g.device)
          for g in mats for n, cols in [g.shape] for rank in ranks}

    def once(rank: int) -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for g in mats:
            m = g.to(torch.float32, copy=True)
            p = orthonormalize(m @ orthonormalize(qs[(*m.shape, rank)]))
            g.new_empty(g.shape).copy_(p @ (m.T @ p).T)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    best = [float("inf")] * len(ranks)
    for _ in range(3):
        for i, rank in enumerate(ranks):
            best[i] = min(best[i], once(rank))
    return best


class StepTimes:
    """One rank's step times: the open step's start, iteration and rank and
    its last completion so far; the warm-up's raw steps (from iteration 2:
    DDP rebuilds its buckets after the first) and the compressed steps as
    (rank, seconds), the latest SPANS_KEPT of each."""

    def __init__(self) -> None:
        self.open: tuple[float, int, int | None] | None = None
        self.done_at = 0.0
        self.raw: list[float] = []
        self.compressed: list[tuple[int, float]] = []

    def start(self, iteration: int, rank: int | None) -> None:
        """At an iteration's first hook call: files the previous iteration's
        time (DDP waited for all its futures before this backward pass) and
        opens this one's."""
        if self.open is not None:
            start, it, was = self.open
            if self.done_at > start:
                seconds = self.done_at - start
                if was is not None:
                    self.compressed = self.compressed[1 - SPANS_KEPT:] + [(was, seconds)]
                elif it >= 2 and not self.compressed:
                    self.raw = self.raw[1 - SPANS_KEPT:] + [seconds]
        self.open = (time.perf_counter(), iteration, rank)
        self.done_at = 0.0

    def done(self, _: torch.futures.Future[torch.Tensor]) -> None:
        """A future's completion callback (on the backend's completion
        thread; a float store is atomic under the GIL)."""
        self.done_at = max(self.done_at, time.perf_counter())

    def overhead(self, shapes: Sequence[tuple[int, int]], model: dict[str, Any]) -> float | None:
        """What a compressed step costs beyond exchange_seconds(shapes, r,
        **model): the median over the kept compressed steps of (step -
        median raw step) - (model at its rank - model raw). None without
        both kinds of steps."""
        if not (self.raw and self.compressed):
            return None
        raw = statistics.median(self.raw)
        model_raw = exchange_seconds(shapes, 0, **model)
        return statistics.median((s - raw) - (exchange_seconds(shapes, r, **model) - model_raw)
                                 for r, s in self.compressed)
