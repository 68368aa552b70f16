"""EDGC's dynamic alignment compressor: the window rules that turn the
entropy of each window into a rank, and the rank bound from a link model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .error_model import rank_after_entropy_change


@dataclasses.dataclass(frozen=True)
class WindowRecord:
    """What one window decided: the iterations done at its end, the window's
    mean entropy (agreed over the group), Eq. 15's unclamped rank, the
    stage's rank from then on (None: not compressing), and the r_max it was
    clamped to."""

    iteration: int
    entropy: float
    target: float
    rank: int | None
    r_max: int | None = None


class RankController:
    """Per-window rank decisions, identical on every rank given the same
    (agreed) window entropies.

    The error budget starts at the first window: rank r_max's error at the
    entropy H_0 of the first window ("the compression error of the maximum
    rank, from the initial gradients"). Until compression starts, Eq. 15
    measures each window against it: target = g^-1(e^(2 (H_0 - H_w))
    g(r_max)), for the reference shape (the largest matrix). From then on
    the direction follows the change of the windows' mean entropy (the
    paper's section IV-D3: a decrease lowers the rank, otherwise it rises),
    so Eq. 15 runs from the previous window: target = g^-1(e^(2 (H_{w-1} -
    H_w)) g(r)), r the rank in use, which keeps the error of the rank in
    use where the clamps held it. (Anchoring every window at H_0 instead
    cannot raise the rank while the entropy stays below the first window's,
    however much it rises: in a 100-step demo the rank then fell to r_min
    and stayed there, benchmarks/RESULTS.md (m2).) Then:

    * warm-up: nothing is compressed until at least warmup_iterations are done
      and round(target) < r_max; compression then starts from r_max;
    * the base rank (pipeline stage 1's) moves toward round(target) by at most
      max_step per window and stays in [r_min, r_max];
    * stage alignment: stage i (0-based, i = stage) uses
      base + i * stage_offset, stage_offset = t_b / k (a micro-batch's
      backward time over the seconds one unit of rank adds to the DP
      all-reduce), clamped to [r_min, r_max], so that later-starting stages
      finish their DP sync with stage 1.

    r_max may be None at first: EDGCState sets it from the measured link
    (max_rank) before the first window ends, and may lower it later from the
    measured steps. An r_max below r_min (no rank pays on this link) keeps
    the controller in warm-up, or stops compression once started.
    """

    def __init__(self, r_min: int, r_max: int | None, warmup_iterations: int, max_step: int = 8, stage: int = 0,
                 stage_offset: float = 0.0) -> None:
        if r_min < 1 or r_max is not None and r_max < r_min:
            raise ValueError(f"need 1 <= r_min <= r_max, got r_min={r_min} r_max={r_max}")
        if max_step < 1:
            raise ValueError(f"max_step must be >= 1, got {max_step}")
        if stage < 0 or stage_offset < 0:
            raise ValueError(f"stage and stage_offset must be >= 0, got {stage} and {stage_offset}")
        self.r_min = r_min
        self.r_max = r_max
        self.warmup_iterations = warmup_iterations
        self.max_step = max_step
        self.stage = stage
        self.stage_offset = stage_offset
        self.h_ref: float | None = None
        self.base_rank: int | None = None

    @property
    def rank(self) -> int | None:
        """This stage's rank, or None while nothing is compressed (warm-up,
        or an r_max below r_min)."""
        if self.base_rank is None or self.r_max is None or self.r_max < self.r_min:
            return None
        return min(max(round(self.base_rank + self.stage * self.stage_offset), self.r_min), self.r_max)

    def end_window(self, entropy: float, iterations_done: int, shape: tuple[int, int]) -> WindowRecord:
        """Applies one window's mean entropy; shape is the reference matrix."""
        if self.r_max is None:
            raise RuntimeError("RankController.end_window before r_max was set")
        if self.r_max < self.r_min:
            return WindowRecord(iterations_done, entropy, 0.0, None, self.r_max)
        cap = min(self.r_max, *shape)
        lo = min(self.r_min, cap)
        if self.h_ref is None:
            self.h_ref = entropy
        previous = cap if self.base_rank is None else min(max(self.base_rank, lo), cap)
        target = rank_after_entropy_change(previous, shape[0], shape[1], self.h_ref - entropy)
        if self.base_rank is None and (iterations_done < self.warmup_iterations or round(target) >= cap):
            return WindowRecord(iterations_done, entropy, target, None, self.r_max)
        step = min(max(round(target), previous - self.max_step), previous + self.max_step)
        self.base_rank = min(max(step, lo), cap)
        self.h_ref = entropy
        return WindowRecord(iterations_done, entropy, target, self.rank, self.r_max)


def allreduce_seconds(nbytes: float, world_size: int, latency_s: float, bytes_per_s: float) -> float:
    """A ring all-reduce's time under the link model alpha + bytes/beta per
    step: 2(W-1) steps, each moving nbytes/W."""
    if world_size < 2:
        return 0.0
    steps = 2 * (world_size - 1)
    return steps * latency_s + steps * nbytes / (world_size * bytes_per_s)


def max_rank(shapes: Sequence[tuple[int, int]], world_size: int, latency_s: float, bytes_per_s: float,
             compress_s_per_rank: float, grad_bytes: int = 4, factor_bytes: int = 4,
             min_compression_rate: float = 2.0, compress_s_fixed: float = 0.0, step_overhead_s: float = 0.0) -> int:
    """r_max from a link model: the largest r such that at every rank from 1
    to r, compressing, sending and decompressing beats sending the raw
    gradient (EDGC's Eq. 2),

        T_c(r) + AR(r sum_c(m + n) fb + raw_r gb) < AR(sum(m n) gb),

    AR the ring all-reduce time of allreduce_seconds (latency_s per step,
    bytes_per_s per link; two all-reduces' latency on the left, P's, which
    the matrices sent raw join, and Q's). At rank r a matrix is compressed
    only if (m + n) r min_compression_rate < m n, as the hook decides: the
    others travel raw (raw_r: their elements) and cost no compression.
    T_c(r) = compress_s_fixed * (the compressed matrices' share of the
    matrices) + compress_s_per_rank * r * (their share of the elements): the
    paper's T_comm = k r + b, b and k measured for compressing and
    decompressing every matrix of shapes, b per matrix (the QRs' and the
    calls' fixed cost), k per element. step_overhead_s is added to every
    compressed step's side: what a compressed step was measured to cost
    beyond this model (EDGCState's calibration; it may be negative). shapes
    are the gradient's matrices; grad_bytes and factor_bytes the element
    sizes of the raw gradient and of the factors (this hook sends float32
    factors). 0 when no rank pays.

    (Counting every matrix as compressed at every rank, as this did before,
    put r_max past the rank from which the demo sends every matrix raw, and
    EDGC there ran slower than plain DDP: benchmarks/RESULTS.md (m4). A
    T_c without b, k being the time at rank 4 over 4, as EDGCState measured
    it before, put the demo's compression at rank 64 at 349 ms, 7.5 times
    the fitted 47 ms: RESULTS.md (m5).)

    This is the hook point for the backend's measured link: it takes the link
    as arguments; pass what the group measured for latency_s and bytes_per_s.
    """
    if not shapes or world_size < 2:
        return 0
    if (latency_s < 0 or bytes_per_s <= 0 or compress_s_per_rank < 0 or compress_s_fixed < 0
            or min_compression_rate <= 0):
        raise ValueError("need latency_s >= 0, bytes_per_s > 0, compress_s_per_rank >= 0, compress_s_fixed >= 0, "
                         "min_compression_rate > 0")
    total = sum(m * n for m, n in shapes)
    raw = allreduce_seconds(total * grad_bytes, world_size, latency_s, bytes_per_s)
    fixed = 2 * allreduce_seconds(0, world_size, latency_s, bytes_per_s)

    def moved(nbytes: float) -> float:
        return allreduce_seconds(nbytes, world_size, 0.0, bytes_per_s)

    # Matrix i is compressed at rank r while r < limit[i]. Between two
    # limits the compressed set is fixed and the cost is A + B r.
    limit = sorted((m * n / ((m + n) * min_compression_rate), m * n, m + n) for m, n in shapes)
    comp_elems, comp_sides = total, sum(m + n for m, n in shapes)
    best, r, i = 0, 1, 0
    while True:
        while i < len(limit) and limit[i][0] <= r:
            comp_elems -= limit[i][1]
            comp_sides -= limit[i][2]
            i += 1
        if comp_elems == 0:
            break
        end = math.ceil(limit[i][0]) - 1  # the last rank before the next matrix goes raw
        a = (fixed + step_overhead_s + moved((total - comp_elems) * grad_bytes)
             + compress_s_fixed * (len(limit) - i) / len(limit))
        b = compress_s_per_rank * comp_elems / total + moved(comp_sides * factor_bytes)
        if a + b * r >= raw:
            break
        top = end if b <= 0 else min(end, math.ceil((raw - a) / b) - 1)
        best = top
        if top < end:
            break
        r = end + 1
    return max(0, min(best, max(min(s) for s in shapes)))


def exchange_seconds(shapes: Sequence[tuple[int, int]], r: int, world_size: int, latency_s: float,
                     bytes_per_s: float, compress_s_per_rank: float, grad_bytes: int = 4, factor_bytes: int = 4,
                     min_compression_rate: float = 2.0, compress_s_fixed: float = 0.0) -> float:
    """max_rank's model of one step's gradient exchange: at rank r >= 1 the
    left side of its inequality, at r = 0 the raw all-reduce (its right
    side)."""
    total = sum(m * n for m, n in shapes)
    if r < 1:
        return allreduce_seconds(total * grad_bytes, world_size, latency_s, bytes_per_s)
    comp = [(m, n) for m, n in shapes if (m + n) * r * min_compression_rate < m * n]
    elems = sum(m * n for m, n in comp)
    sent = r * sum(m + n for m, n in comp) * factor_bytes + (total - elems) * grad_bytes
    return (compress_s_fixed * len(comp) / len(shapes) + compress_s_per_rank * r * elems / total
            + 2 * allreduce_seconds(0, world_size, latency_s, bytes_per_s)
            + allreduce_seconds(sent, world_size, 0.0, bytes_per_s))
