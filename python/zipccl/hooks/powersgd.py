"""PowerSGD, the compressor under EDGC: one bucket's low-rank exchange, in
float32 whatever the gradients' dtype (torch's PowerSGD hook's algorithm):

* 1-D tensors, and matrices for which (n + m) r min_compression_rate >= n m,
  are averaged by one plain all-reduce in the bucket's dtype;
* every other gradient, viewed as an n x m matrix M (plus its error-feedback
  residual), becomes P = M Q (Q warm-started from the last step and
  orthonormalised), all-reduce(P), P orthonormalised, Q = M^T P,
  all-reduce(Q) / W, M^ = P Q^T; the local residual (I - P P^T) M (plus
  M^'s rounding to a half-precision gradient) goes into the next step.

Ordering. Every collective is issued from the thread that calls the hooks,
never from a future's callback: the P all-reduce of bucket b in its own hook,
its Q all-reduce in the next bucket's hook (the last bucket's at once). So
every rank issues the same collectives in the same order, which a backend
that matches collectives by sequence number (zipccl, gloo) needs; torch's
hook issues its second and third all-reduces from callbacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from .edgc import EDGCState


def shared_seed(*parts: int) -> int:
    # A hash of ints is the same in every process (PYTHONHASHSEED only
    # randomises str and bytes), so every rank derives the same seeds.
    return hash(parts) & (2**63 - 1)


def orthonormalize(p: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis (reduced QR's Q) of p's columns, in float32:
    torch's QR takes no half precision, and Householder QR needs no epsilon
    for zero columns."""
    return torch.linalg.qr(p.float(), mode="reduced").Q


def allreduce_mean(buffer: torch.Tensor, group: dist.ProcessGroup, world: int) -> torch.futures.Future[torch.Tensor]:
    """A plain averaging all-reduce of the bucket, in its dtype."""
    fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))


def compress(state: EDGCState, group: dist.ProcessGroup, world: int, index: int, buffer: torch.Tensor,
             grads: list[torch.Tensor], rank: int) -> torch.futures.Future[torch.Tensor]:
    """Phase one (plain all-reduce, P all-reduce) now; phase two (Q
    all-reduce, decompression) left in state._pending."""
    errors = state.errors.setdefault(index, {})
    qs = state.qs.setdefault(index, {})
    plain: list[torch.Tensor] = []
    mats: list[tuple[int, torch.Tensor, int]] = []
    for j, g in enumerate(grads):
        if g.dim() >= 2:
            n, m = g.shape[0], g.numel() // g.shape[0]
            r = min(n, m, rank)
            if (n + m) * r * state.min_compression_rate < n * m:
                mats.append((j, g, r))
                continue
        # A matrix compressed before and not now: its residual goes in exactly.
        e = errors.pop(j, None)
        qs.pop(j, None)
        if e is not None and e.numel() == g.numel():
            g.view(-1).add_(e.view(-1).to(g.dtype))
        plain.append(g)
    elem = buffer.element_size()
    state.bytes_in += buffer.numel() * elem
    plain_fut = None
    if plain:
        flat = torch.cat([g.reshape(-1) for g in plain])
        state.bytes_out += flat.numel() * elem
        plain_fut = dist.all_reduce(flat, group=group, async_op=True).get_future()
    ms, qmats = [], []
    for j, g, r in mats:
        m = g.reshape(g.shape[0], -1).to(torch.float32, copy=True)
        e = errors.get(j)
        if e is not None and e.shape == m.shape:
            m += e
        ms.append(m)
        qmats.append(orthonormalize(state._q_for(index, j, m.shape[1], r, m.device)))
    p_fut = None
    if mats:
        pflat = torch.cat([(m @ q).reshape(-1) for m, q in zip(ms, qmats)])
        state.bytes_out += pflat.numel() * 4 + sum(q.numel() for q in qmats) * 4  # P now, Q in phase two
        p_fut = dist.all_reduce(pflat, group=group, async_op=True).get_future()
    out: torch.futures.Future[torch.Tensor] = (
        torch.futures.Future(devices=[buffer.device]) if buffer.device.type == "cuda" else torch.futures.Future())
    ps: list[torch.Tensor] = []  # the orthonormalised P matrices, from phase two

    def decompress(fut: torch.futures.Future[list[torch.Tensor]]) -> None:
        try:
            qflat = fut.value()[0].div_(world)
            off = 0
            for (j, g, r), p in zip(mats, ps):
                cols = g.numel() // g.shape[0]
                q = qflat[off:off + cols * r].view(cols, r)
                off += q.numel()
                mhat = p @ q.T
                g.copy_(mhat.view_as(g))
                if g.dtype != torch.float32:  # the rounding too: it is the same on every rank
                    errors[j] += mhat - g.reshape(mhat.shape).float()
                qs[j] = q.clone()
            out.set_result(buffer)
        except BaseException as exc:
            out.set_exception(exc)

    def phase_two() -> None:
        try:
            if plain_fut is not None:
                avg = plain_fut.wait()[0].div_(world)
                off = 0
                for g in plain:
                    g.copy_(avg[off:off + g.numel()].view_as(g))
                    off += g.numel()
            if p_fut is None:
                out.set_result(buffer)
                return
            pflat = p_fut.wait()[0]
            off = 0
            for m, q in zip(ms, qmats):
                ps.append(orthonormalize(pflat[off:off + m.shape[0] * q.shape[1]].view(m.shape[0], q.shape[1])))
                off += m.shape[0] * q.shape[1]
            qlocal = [m.T @ p for m, p in zip(ms, ps)]
            # The local residual (I - P P^T) M, as in PowerSGD's paper: the
            # part of M outside the agreed subspace. (torch's hook keeps
            # M - P P^T mean(M), which adds each rank's deviation from the
            # mean, a zero-mean random walk that grows without bound.)
            for (j, _, _), m, p, q in zip(mats, ms, ps, qlocal):
                errors[j] = m - p @ q.T
            qflat = torch.cat([q.reshape(-1) for q in qlocal])
            dist.all_reduce(qflat, group=group, async_op=True).get_future().then(decompress)
        except BaseException as exc:
            out.set_exception(exc)
            raise

    state._pending = phase_two
    return out


def fold_residuals(state: EDGCState, index: int, grads: list[torch.Tensor]) -> None:
    """Compression stopped (r_max fell below r_min): the bucket's residuals
    go into its first raw all-reduce, so no gradient is lost."""
    errors = state.errors.pop(index, None)
    state.qs.pop(index, None)
    for j, e in (errors or {}).items():
        if j < len(grads) and e.numel() == grads[j].numel():
            grads[j].view(-1).add_(e.view(-1).to(grads[j].dtype))
