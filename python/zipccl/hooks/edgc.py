"""EDGC (entropy-driven dynamic gradient compression) as a DDP communication
hook: PowerSGD underneath, with the rank chosen per window from the
gradients' sampled entropy.

    state = zipccl.hooks.EDGCState(group, r_min=16, r_max=64, window=1000, total_iterations=100_000)
    ddp.register_comm_hook(state, zipccl.hooks.edgc_hook)

Compression, once warm-up is over, is PowerSGD's (powersgd.py: the
algorithm, and why every collective is issued from the hook's thread).

Agreement. The rank changes only at a window's end, from the window's mean
entropy all-reduced over the group (one small all-reduce per window), so
every rank computes the same rank from the same numbers.

Measured steps. With a measured r_max the hook times its own steps on CPU
tensors (costs.py: how, and why), and at each window's end lowers r_max to
max_rank's with the group's mean measured overhead on every compressed
step; never above the first estimate. Below r_min, compression (and the
entropy sampling) stops for the rest of the run, with a warning, and the
residuals go into the next raw all-reduce.
"""

# No `from __future__ import annotations` here: DDP's register_comm_hook
# compares edgc_hook's annotations with dist.GradBucket and
# torch.futures.Future[torch.Tensor] as objects.
import logging
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from .controller import RankController, WindowRecord, exchange_seconds, max_rank
from .costs import StepTimes, fit_compression_time, time_compression, timing_rank
from .entropy import default_bin_width, histogram_entropy, sample_elements
from .powersgd import allreduce_mean, compress, fold_residuals, shared_seed


log = logging.getLogger(__name__)


class EDGCState:
    """EDGC's hyperparameters and its state across steps (errors, Q matrices,
    entropy accumulators, the rank controller).

    Args:
        process_group: the DP group (None: the default group).
        r_min, r_max: the rank's bounds. r_max None (on a zipccl group):
            the largest rank for which compressing, sending and
            decompressing beats sending the raw gradient (max_rank), from
            the link zipccl measured for the group (zipccl.link_model) and
            this hook's own compression time, timed on the gradients at
            ranks r_min and timing_rank(r_min) and averaged over the group
            (a fixed part and a part per unit of rank); set at the first
            window's end, the same on every rank, and lowered at later
            windows' ends when compressed steps cost more than the model
            says (costs.py; state.link holds what it used). With another
            backend r_max must be given.
        window: iterations per window; the rank changes only at a window's
            end (paper: 1000).
        warmup_fraction, total_iterations: no compression before
            max(2, ceil(warmup_fraction * total_iterations)) iterations, and
            not before Eq. 15 asks for less than r_max.
        alpha: iteration sampling rate; entropy is measured every
            round(1/alpha) iterations.
        beta: the fraction of each bucket's elements sampled for the entropy.
        stage, stage_offset: pipeline stage id (0 for stage 1) and t_b / k,
            the extra rank per stage that aligns the stages' DP sync
            (r_i = r_1 + (i - 1) t_b / k).
        min_compression_rate: a matrix is compressed only if
            (n + m) r min_compression_rate < n m, as in torch's hook.
        max_step: the largest rank change per window (paper: 8).
        seed: seeds Q's random initialisation (the same on every rank) and
            the entropy samples.

    The state pickles (torch.save) without its process group, which
    unpickling sets to the default group, as torch's PowerSGDState does; set
    ``process_group`` afterwards for another group. torch.load needs
    ``weights_only=False`` for it.
    """

    def __init__(self, process_group: dist.ProcessGroup | None, *, r_min: int = 16, r_max: int | None = None,
                 window: int = 1000, warmup_fraction: float = 0.1, total_iterations: int, alpha: float = 0.1,
                 beta: float = 0.25, stage: int = 0, stage_offset: float = 0.0, min_compression_rate: float = 2.0,
                 max_step: int = 8, seed: int = 0) -> None:
        if r_max is None and dist.get_backend(process_group) != "zipccl":
            raise ValueError(f"EDGCState(r_max=None) takes r_max from the link zipccl measures; on a "
                             f"{dist.get_backend(process_group)} group pass r_max (zipccl.hooks.max_rank computes "
                             "one from a link's latency and bandwidth)")
        if window < 1 or total_iterations < 1:
            raise ValueError(f"window and total_iterations must be >= 1, got {window} and {total_iterations}")
        if not 0 < alpha <= 1 or not 0 < beta <= 1:
            raise ValueError(f"alpha and beta must be in (0, 1], got {alpha} and {beta}")
        if not 0 <= warmup_fraction <= 1:
            raise ValueError(f"warmup_fraction must be in [0, 1], got {warmup_fraction}")
        self.process_group = process_group
        self.window = window
        self.period = max(1, round(1 / alpha))
        self.beta = beta
        self.min_compression_rate = min_compression_rate
        self.seed = seed
        # DDP rebuilds its buckets after the first iteration: nothing keyed
        # by bucket index (errors, Q, bin widths) may be kept before it.
        warmup = max(2, math.ceil(warmup_fraction * total_iterations))
        self.controller = RankController(r_min, r_max, warmup, max_step, stage, stage_offset)
        self.iter = 0
        self.errors: dict[int, dict[int, torch.Tensor]] = {}
        self.qs: dict[int, dict[int, torch.Tensor]] = {}
        self.bin_widths: dict[int, float] = {}
        self.reference_shape: tuple[int, int] | None = None
        self.windows: list[WindowRecord] = []
        self.bytes_in = 0
        self.bytes_out = 0
        # r_max=None: each bucket's matrix shapes and seconds to compress
        # them at ranks r_min and timing_rank(r_min) (timed once), and what
        # max_rank was given
        self.r_min = r_min
        self.shapes: dict[int, list[tuple[int, int]]] = {}
        self.compress_seconds: dict[int, tuple[float, float]] = {}
        self.link: dict[str, float] | None = None
        self._grad_bytes = 4
        self._entropy_sum = 0.0
        self._entropy_weight = 0.0
        self._pending: Callable[[], None] | None = None
        self.steps = StepTimes()

    @property
    def rank(self) -> int | None:
        """The rank the next step compresses with; None in warm-up."""
        return self.controller.rank

    def compression_stats(self) -> tuple[float, int, int]:
        """(ratio, bytes in, bytes out): the gradient bytes the hook was given
        and the bytes it handed to all-reduces (payload, not wire bytes)."""
        return (self.bytes_in / self.bytes_out if self.bytes_out else 0.0, self.bytes_in, self.bytes_out)

    def __getstate__(self) -> dict[str, Any]:
        if self._pending is not None:
            raise RuntimeError("EDGCState cannot be saved in the middle of a backward pass")
        return {k: v for k, v in self.__dict__.items() if k not in ("process_group", "_pending")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.process_group = distributed_c10d._get_default_group()
        self._pending = None

    # -- per-bucket work (called by edgc_hook) --

    def _flush(self) -> None:
        """Issues the pending bucket's second phase (its Q all-reduce)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending()

    def _observe(self, index: int, buffer: torch.Tensor, grads: list[torch.Tensor]) -> None:
        """Samples the bucket's entropy on measuring iterations; tracks the
        largest matrix (the rank model's reference shape); until r_max is
        set, times the bucket's compression once."""
        self._grad_bytes = buffer.element_size()
        for g in grads:
            if g.dim() >= 2:
                shape = (g.shape[0], g.numel() // g.shape[0])
                if self.reference_shape is None or shape[0] * shape[1] > math.prod(self.reference_shape):
                    self.reference_shape = shape
        if self.iter < 1 or self.iter % self.period:
            return
        if self.controller.r_max is not None and self.controller.r_max < self.r_min:
            return  # no rank pays, for good (r_max never rises): the entropy would go unused
        if self.controller.r_max is None and index not in self.compress_seconds:
            self._time_compression(index, grads)
        gen = torch.Generator(device=buffer.device).manual_seed(shared_seed(self.seed, self.iter, index))
        sample = sample_elements(buffer, self.beta, gen)
        width = self.bin_widths.get(index)
        if width is None:
            width = default_bin_width(sample)
            if width is None:
                return
            self.bin_widths[index] = width
        h = histogram_entropy(sample, width)
        if math.isfinite(h):
            self._entropy_sum += h * buffer.numel()
            self._entropy_weight += buffer.numel()

    def _time_compression(self, index: int, grads: list[torch.Tensor]) -> None:
        """Times this bucket's compression at ranks r_min and
        timing_rank(r_min), to which max_rank's T_c = b + k r is fitted."""
        mats = [g.reshape(g.shape[0], -1) for g in grads if g.dim() >= 2]
        lo, hi = time_compression(mats, (self.r_min, timing_rank(self.r_min)), shared_seed(self.seed, index))
        self.shapes[index] = [(g.shape[0], g.shape[1]) for g in mats]
        self.compress_seconds[index] = (lo, hi)

    def _end_iteration(self, group: dist.ProcessGroup, device: torch.device) -> None:
        """Counts the iteration; at a window's end agrees on the window's
        entropy (and, until r_max is set, the compression time) over the
        group and updates the rank."""
        self.iter += 1
        if self.iter % self.window:
            return
        timed_lo = sum(lo for lo, _ in self.compress_seconds.values())
        timed_hi = sum(hi for _, hi in self.compress_seconds.values())
        world = dist.get_world_size(group)
        overhead = self._step_overhead(world)
        t = torch.tensor([self._entropy_sum, self._entropy_weight, timed_lo, timed_hi, overhead or 0.0,
                          overhead is not None], dtype=torch.float64, device=device)
        dist.all_reduce(t, group=group)
        self._entropy_sum = self._entropy_weight = 0.0
        total, weight, sum_lo, sum_hi, sum_overhead, measured = t.tolist()
        if self.controller.r_max is None:
            if sum_lo <= 0:
                return  # no bucket timed yet: the next window sets r_max
            self._set_r_max(group, sum_lo / world, sum_hi / world)
        elif measured == world:
            self._calibrate(world, sum_overhead / world)
        if weight > 0 and self.reference_shape is not None:
            self.windows.append(self.controller.end_window(total / weight, self.iter, self.reference_shape))

    def _set_r_max(self, group: dist.ProcessGroup, seconds_lo: float, seconds_hi: float) -> None:
        """r_max from zipccl's measured link and the group's mean compression
        times at ranks r_min and timing_rank(r_min) (the same numbers on
        every rank, so the same r_max)."""
        from .. import link_model

        link = link_model(group)
        if link is None:
            raise RuntimeError("EDGCState(r_max=None): zipccl has not measured this group's link (it does at the "
                               "first float collective of 64 KiB or more under compression 'auto'; under "
                               "'never' it does not): pass r_max")
        shapes = [s for per_bucket in self.shapes.values() for s in per_bucket]
        fixed, per_rank = fit_compression_time(self.r_min, seconds_lo, timing_rank(self.r_min), seconds_hi)
        self.controller.r_max = max_rank(shapes, dist.get_world_size(group), link.latency_s, link.bytes_per_s,
                                         per_rank, grad_bytes=self._grad_bytes,
                                         min_compression_rate=self.min_compression_rate, compress_s_fixed=fixed)
        self.link = {"latency_s": link.latency_s, "bytes_per_s": link.bytes_per_s, "compress_s_fixed": fixed,
                     "compress_s_per_rank": per_rank, "r_max": self.controller.r_max}

    def _model(self, world: int) -> tuple[list[tuple[int, int]], dict[str, Any]]:
        """The shapes and the arguments _set_r_max gave max_rank."""
        assert self.link is not None
        shapes = [s for per_bucket in self.shapes.values() for s in per_bucket]
        return shapes, {"world_size": world, "latency_s": self.link["latency_s"],
                        "bytes_per_s": self.link["bytes_per_s"], "compress_s_per_rank": self.link["compress_s_per_rank"],
                        "grad_bytes": self._grad_bytes, "min_compression_rate": self.min_compression_rate,
                        "compress_s_fixed": self.link["compress_s_fixed"]}

    def _step_overhead(self, world: int) -> float | None:
        """This rank's measure of what a compressed step costs beyond the
        model (StepTimes.overhead); None before it can say, or with r_max
        given (state.link is set only when r_max is measured)."""
        if self.link is None:
            return None
        return self.steps.overhead(*self._model(world))

    def _calibrate(self, world: int, overhead_s: float) -> None:
        """r_max from the model plus the group's mean measured overhead, no
        higher than the first estimate (state.link["r_max"])."""
        assert self.link is not None
        shapes, model = self._model(world)
        first = int(self.link["r_max"])
        r_max = min(first, max_rank(shapes, step_overhead_s=overhead_s, **model))
        was = self.controller.rank
        self.controller.r_max = r_max
        self.link.update(step_overhead_s=overhead_s, r_max_measured=r_max)
        if was is not None and self.controller.rank is None:
            model_raw = exchange_seconds(shapes, 0, **model)
            log.warning("EDGC: compression does not pay on this group: a compressed step took %.1f ms more than "
                        "the link model says (raw exchange %.1f ms, at rank %d %.1f ms); sending raw gradients "
                        "from now on", overhead_s * 1e3, model_raw * 1e3, was,
                        exchange_seconds(shapes, was, **model) * 1e3)

    def _q_for(self, index: int, j: int, cols: int, r: int, device: torch.device) -> torch.Tensor:
        """Q for matrix j of the bucket: last step's (warm start), cut or
        widened to r columns; new columns random, the same on every rank."""
        q = self.qs.get(index, {}).get(j)
        if q is not None and q.shape[0] == cols and q.shape[1] >= r:
            return q[:, :r]
        have = 0 if q is None or q.shape[0] != cols else q.shape[1]
        gen = torch.Generator().manual_seed(shared_seed(self.seed, self.iter, index, j))
        new = torch.randn(cols, r - have, generator=gen).to(device)
        return new if have == 0 else torch.cat([q, new], dim=1)


def edgc_hook(state: EDGCState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: a plain averaging all-reduce in warm-up,
    then EDGC's low-rank compression at the state's current rank. Register
    with ``ddp.register_comm_hook(state, edgc_hook)``."""
    state._flush()
    buffer = bucket.buffer()
    # A CUDA future can complete before the device work does: the step
    # times, and so the correction, are for CPU tensors only.
    timed = buffer.device.type == "cpu"
    if timed and (state.steps.open is None or state.steps.open[1] != state.iter):
        state.steps.start(state.iter, state.rank)
    group = state.process_group if state.process_group is not None else distributed_c10d._get_default_group()
    world = dist.get_world_size(group)
    index = bucket.index()
    grads = bucket.gradients()
    state._observe(index, buffer, grads)
    rank = state.rank
    if rank is None:
        fold_residuals(state, index, grads)
        state.bytes_in += buffer.numel() * buffer.element_size()
        state.bytes_out += buffer.numel() * buffer.element_size()
        fut = allreduce_mean(buffer, group, world)
    else:
        fut = compress(state, group, world, index, buffer, grads, rank)
    if timed:
        fut.add_done_callback(state.steps.done)
    if bucket.is_last():
        state._flush()
        state._end_iteration(group, buffer.device)
    return fut
