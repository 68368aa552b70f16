"""The benchmarked collectives as (prepare, call, result) on one group.

``prepare`` restores what the previous call overwrote and is not timed:
all_reduce works in place, and summing a buffer into itself 4x per call
would reach inf in bfloat16 within a few dozen calls, which would change
what a codec sees. ``call`` is the timed collective, blocking until done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .specs import OpSpec


@dataclass
class Bound:
    """One op on one group with its buffers."""

    prepare: Callable[[], None]
    call: Callable[[], None]
    result: torch.Tensor  # what to compare across backends


def count_for(spec: OpSpec, size: int, itemsize: int) -> int:
    """nccl-tests' count column: elements of the size buffer."""
    return size // itemsize


def a2a_splits(count: int, n: int, skew: float) -> list[list[int]]:
    """Elements rank r sends rank j (splits[r][j]) in an uneven all_to_all of
    n ranks that moves n * count elements in all, as MoE routing makes them:
    rank r sends a share w[r] / sum(w) of the total and splits it over the
    ranks j by w[(j - r - 1) mod n], with w[k] = 1 / (1 + k)^skew, so that
    its largest share goes to the next rank, over the wire. skew 0 is the
    even all_to_all. Every rank computes the same matrix."""
    w = [1.0 / (1 + k) ** skew for k in range(n)]
    total = n * count
    sends = [int(total * x / sum(w)) for x in w]
    sends[0] += total - sum(sends)
    splits = []
    for r in range(n):
        row_w = [w[(j - r - 1) % n] for j in range(n)]
        row = [int(sends[r] * x / sum(row_w)) for x in row_w]
        row[(r + 1) % n] += sends[r] - sum(row)
        splits.append(row)
    return splits


def bind(spec: OpSpec, group, inp: torch.Tensor, rank: int, world_size: int,
         splits: list[list[int]] | None = None) -> Bound:
    """Buffers and closures for spec on group; inp is this rank's input in
    the op's input layout (see specs: size conventions). splits: an uneven
    all_to_all's (a2a_splits; inp then holds sum(splits[rank]) elements)."""
    n = world_size
    name = spec.name
    if name == "all_reduce":
        buf = torch.empty_like(inp)

        def prepare() -> None:
            buf.copy_(inp)

        return Bound(prepare, lambda: dist.all_reduce(buf, group=group), buf)
    if name == "all_gather":
        out = torch.empty(inp.numel() * n, dtype=inp.dtype, device=inp.device)
        return Bound(_noop, lambda: dist.all_gather_into_tensor(out, inp, group=group), out)
    if name == "reduce_scatter":
        out = torch.empty(inp.numel() // n, dtype=inp.dtype, device=inp.device)
        return Bound(_noop, lambda: dist.reduce_scatter_tensor(out, inp, group=group), out)
    if name == "all_to_all" and splits:
        ins, outs = splits[rank], [row[rank] for row in splits]
        out = torch.empty(sum(outs), dtype=inp.dtype, device=inp.device)
        return Bound(_noop, lambda: dist.all_to_all_single(out, inp, output_split_sizes=outs,
                                                           input_split_sizes=ins, group=group), out)
    if name == "all_to_all":
        out = torch.empty_like(inp)
        return Bound(_noop, lambda: dist.all_to_all_single(out, inp, group=group), out)
    if name == "broadcast":
        buf = inp.clone()

        def prepare_bcast() -> None:
            if rank != 0:
                buf.zero_()  # cheap insurance that the data really arrived

        return Bound(prepare_bcast, lambda: dist.broadcast(buf, src=0, group=group), buf)
    if name == "send_recv":
        out = torch.empty_like(inp)
        peers = ((rank + 1) % n, (rank - 1) % n)

        def call() -> None:
            ops = [dist.P2POp(dist.isend, inp, peers[0], group=group),
                   dist.P2POp(dist.irecv, out, peers[1], group=group)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return Bound(_noop, call, out)
    raise ValueError(f"unknown op {name}")


def input_numel(spec: OpSpec, count: int, world_size: int) -> int:
    """Elements of one rank's input for an op whose size holds count
    elements (all_gather's input is one rank's share of the output)."""
    return count // world_size if spec.name == "all_gather" else count


def _noop() -> None:
    pass


def abs_sum(inp: torch.Tensor, spec: OpSpec, control, world_size: int, rank: int) -> torch.Tensor:
    """sum(|x_i|) over the ranks' inputs, elementwise, on this rank's part
    of the output (its shard for reduce_scatter)."""
    total = inp.abs().float().cpu()
    dist.all_reduce(total, group=control)
    if spec.name == "reduce_scatter":
        share = total.numel() // world_size
        total = total[rank * share:(rank + 1) * share]
    return total


def reorder_tolerance(inp: torch.Tensor, total: torch.Tensor, world_size: int) -> torch.Tensor | None:
    """Elementwise bound on how far two correct sums of the ranks' inputs
    may differ: each of n-1 additions rounds to half an ulp of the partial
    sum, whatever the order, so two orders differ by at most
    (n-1) * eps * sum(|x_i|) (total). None for integer types (must be
    exact)."""
    if not inp.dtype.is_floating_point:
        return None
    eps = torch.finfo(inp.dtype).eps
    tiny = torch.finfo(inp.dtype).tiny
    return total * ((world_size - 1) * eps) + tiny


LOSSY_BLOCK = {"int8": 2048, "int4": 256, "fp8": 256}  # backend/lossy.BlockOf (fp8: the default fp8_block)
LOSSY_QMAX = {"int8": 127, "int4": 7}


def _blockwise(x: torch.Tensor, block: int, reduce: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """reduce (over the last dimension, keepdim) of each element's block,
    blocks along the last dimension."""
    out = torch.empty_like(x)
    for lo in range(0, x.shape[-1], block):
        out[..., lo:lo + block] = reduce(x[..., lo:lo + block])
    return out


def _block_absmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """Each element's block's largest magnitude."""
    return _blockwise(x, block, lambda b: b.abs().amax(dim=-1, keepdim=True))


def _block_l2(x: torch.Tensor, block: int) -> torch.Tensor:
    """Each element's block's L2 norm."""
    return _blockwise(x, block, lambda b: b.norm(dim=-1, keepdim=True))


def _fp8_step(x: torch.Tensor, block: int) -> torch.Tensor:
    """An fp8 coding's bound per element (docs/FORMAT.md 11): the E4M3
    rounding errs by at most 2^-4 of each transformed value (2^-10 of the
    scale below 2^-6), and the inverse transform spreads an error vector e
    over the block as at most ||e|| / sqrt(B) per element, so at most
    2^-4 ||x_block|| (plus the subnormal floor, within the 1e-2 margin)."""
    return _block_l2(x, block) * 2.0 ** -4 * (1 + 1e-2)


def lossy_tolerance(spec: OpSpec, ref: torch.Tensor, n: int, modes: dict[str, str],
                    total: torch.Tensor | None) -> torch.Tensor | None:
    """The bound of a lossy op's output against the exact one (ref), per
    element: half a step (absmax / qmax / 2; fp8: _fp8_step) per quantization on the way,
    plus the rounding to the dtype. all_gather: one, of each shard's block.
    reduce_scatter: one per contribution that crosses to the owner, each
    block's absmax at most that of sum(|x_i|) (total), so n-1 of those.
    all_reduce: that, plus one of the reduced block. None for ops the modes
    do not cover."""
    mode = modes.get(spec.name)
    if mode is None or not ref.dtype.is_floating_point:
        return None
    block = LOSSY_BLOCK[mode]
    ulp = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}.get(ref.dtype, 0.0)
    x = ref.detach().cpu().double()
    if mode == "fp8":
        if spec.name == "all_gather":
            x = x.reshape(n, -1)
            return (_fp8_step(x, block) + x.abs() * ulp).reshape(ref.shape)
        a = total.double().reshape(x.shape)
        first = _fp8_step(a, block) * (n - 1) + a * n * 2.0 ** -24
        if spec.name == "all_reduce":
            first = first + _fp8_step(a, block) + _fp8_step(first, block)
        return first + (x.abs() + first) * ulp
    q = LOSSY_QMAX[mode]
    if spec.name == "all_gather":
        x = x.reshape(n, -1)
        return (_block_absmax(x, block) / q / 2 * (1 + 1e-4) + x.abs() * ulp).reshape(ref.shape)
    a = total.double().reshape(x.shape)
    first = _block_absmax(a, block) * (n - 1) / q / 2 * (1 + 1e-4) + a * n * 2.0 ** -24
    if spec.name == "all_reduce":
        first = first + (_block_absmax(a, block) + _block_absmax(first, block)) / q / 2 * (1 + 1e-4)
    return first + (x.abs() + first) * ulp


def compare(spec: OpSpec, got: torch.Tensor, ref: torch.Tensor, tol: torch.Tensor | None) -> tuple[str, float]:
    """('exact' | 'ok' | 'FAIL', max abs difference) for got against ref
    (on any device; compared on the CPU)."""
    got, ref = got.cpu(), ref.cpu()
    if torch.equal(got, ref):
        return "exact", 0.0
    both_nan = torch.isnan(got) & torch.isnan(ref) if got.dtype.is_floating_point else None
    diff = (got.double() - ref.double()).abs()
    if both_nan is not None:
        diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    maxdiff = float(diff.max()) if diff.numel() else 0.0
    if tol is not None and bool((diff <= tol.double().to(diff.device)).all()):
        return "ok", maxdiff
    return "FAIL", maxdiff
