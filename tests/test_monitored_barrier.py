"""dist.monitored_barrier on zipccl groups, with gloo's semantics and
messages (torch's own tests match them): it passes when every rank calls
it; when one does not, rank 0 names it (the first missing in rank order, or
every one with wait_all_ranks) within the timeout, and the ranks that did
call it fail at once, saying rank 0 reported errors; a zero timeout is
rank 0's own timeout. Each scenario uses a fresh group: a rank that skips a
monitored barrier leaves its group's barriers out of step, as on gloo.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from refs import guard, no_failures


def _expect(f, what, fn, pattern, within):
    t0 = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        took = time.monotonic() - t0
        if not re.search(pattern, str(e)):
            f.append(f"{what}: message does not match {pattern!r}: {str(e)[:300]}")
        if took > within:
            f.append(f"{what}: failed after {took:.1f}s, expected within {within}s")
        return
    f.append(f"{what}: did not fail")


def task_monitored_barrier(ctx):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    g = dist.new_group(backend="zipccl")
    guard(f, "monitored_barrier", lambda: dist.monitored_barrier(g, timeout=timedelta(seconds=20)))
    guard(f, "monitored_barrier, wait_all_ranks",
          lambda: dist.monitored_barrier(g, timeout=timedelta(seconds=20), wait_all_ranks=True))

    # Rank 1 stays away: rank 0 names it after the timeout, the others (a
    # later rank too) are told and fail too.
    g = dist.new_group(backend="zipccl")
    away = 1
    if me == 0:
        _expect(f, "missing rank", lambda: dist.monitored_barrier(g, timeout=timedelta(seconds=1)),
                f"Rank {away} failed to pass monitoredBarrier", 10)
    elif me != away:
        _expect(f, "arrived rank", lambda: dist.monitored_barrier(g, timeout=timedelta(seconds=1)),
                f"Rank {me} successfully reached monitoredBarrier, but received errors while waiting for "
                f"send/recv from rank 0", 10)
    # The group still works for everything else.
    guard(f, "barrier after a failed monitored_barrier", lambda: dist.barrier(g))

    # Only rank 0 comes: every other rank is named.
    g = dist.new_group(backend="zipccl")
    if me == 0:
        others = ", ".join(str(r) for r in range(1, ws))
        _expect(f, "wait_all_ranks", lambda: dist.monitored_barrier(
            g, timeout=timedelta(seconds=0.2), wait_all_ranks=True), f"Ranks {others} failed to pass monitoredBarrier", 10)
        g = dist.new_group(backend="zipccl")
        _expect(f, "zero timeout", lambda: g.monitored_barrier(timedelta(seconds=0)),
                "Rank 0 timed out in monitoredBarrier", 10)
    else:
        dist.new_group(backend="zipccl")
    dist.barrier(group=ctx.gloo)
    return f


def _torch_allows_it() -> bool:
    """Before 2.15, torch's monitored_barrier refused every backend but gloo
    in Python, before reaching the backend."""
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return (major, minor) >= (2, 15)


@pytest.mark.parametrize("ws", [2, 3])
def test_monitored_barrier(pools, ws):
    if not _torch_allows_it():
        pytest.skip(f"torch {torch.__version__} runs monitored_barrier on gloo groups only (2.15 opened it)")
    no_failures(pools.get(ws).run(task_monitored_barrier))
