"""Work and future semantics, timeouts and profiler names.

* async_op=True returns at once; wait() (also with a timeout), is_completed(),
  get_future() (value, .then chains, a raising callback) behave; many
  outstanding async ops complete in order with the right values.
* Timeouts: the group default (init_process_group/new_group timeout=),
  per-op (Options.timeout), set_timeout and the deprecated _set_pg_timeout,
  for collectives, barrier and recv; each fails within a bounded time with
  a message that says it timed out.
* Every op appears in torch.profiler traces as ``zipccl:<op>``.
"""

from __future__ import annotations

import datetime
import re
import threading
import time

import pytest
import torch
import torch.distributed as dist

from refs import guard, no_failures


def task_async(ctx, delay):
    """Rank 1 joins `delay` seconds late, so rank 0's op cannot finish
    before then: its call must return at once and complete later."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    dist.barrier()
    if me == 1:
        time.sleep(delay)
    t = torch.full((8,), float(me + 1))
    t0 = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    returned = time.monotonic() - t0
    if me == 0:
        if returned > delay / 4:
            f.append(f"all_reduce(async_op=True) took {returned:.3f}s to return")
        if work.is_completed():
            f.append("the work completed before its peer joined")
    if me == 0:
        # wait(timeout) gives up on waiting, not on the op.
        try:
            work.wait(datetime.timedelta(milliseconds=100))
            f.append("wait(timeout=0.1s) returned before the late rank joined")
        except RuntimeError as e:
            if "timed out" not in str(e).lower():
                f.append(f"wait(timeout) raised {e}")
    fut = work.get_future()
    doubled = fut.then(lambda fu: fu.value()[0] * 2)
    thread = {}
    fut.then(lambda fu: thread.setdefault("id", threading.get_ident()))
    work.wait()
    waited = time.monotonic() - t0
    total = ws * (ws + 1) / 2
    if me == 0 and waited < delay * 0.7:
        f.append(f"wait() returned after {waited:.3f}s, before the late rank joined ({delay}s)")
    if not work.is_completed():
        f.append("is_completed() is False after wait()")
    if not torch.equal(t, torch.full((8,), total)):
        f.append(f"all_reduce result {t.tolist()}")
    value = fut.wait()
    if not (isinstance(value, list) and len(value) == 1 and value[0] is not None and torch.equal(value[0], t)):
        f.append(f"future value {value!r}")
    if not torch.equal(doubled.wait(), torch.full((8,), 2 * total)):
        f.append("the .then() chain gave a wrong value")
    if me == 0 and thread.get("id") == threading.get_ident():
        # Rank 0 registered its callbacks before completion (its peer was
        # late): they run on the completion thread, not the caller's.
        f.append("a .then() callback ran on the caller's thread")

    # A callback that raises fails its chained future only.
    def boom(_):
        raise ValueError("callback failure on purpose")

    w2 = dist.all_reduce(torch.ones(2), async_op=True)
    bad = w2.get_future().then(boom)
    w2.wait()
    try:
        bad.wait()
        f.append("a raising .then() callback did not fail its future")
    except Exception as e:  # noqa: BLE001
        if "callback failure on purpose" not in str(e):
            f.append(f"chained future error: {e}")

    # Many outstanding async ops of several kinds, waited in reverse order.
    works, outs = [], []
    for k in range(30):
        x = torch.full((16,), float(k + me))
        outs.append(x)
        works.append(dist.all_reduce(x, async_op=True))
        if k % 5 == 0:
            y = torch.full((4,), float(me)) if me == k % ws else torch.zeros(4)
            outs.append(y)
            works.append(dist.broadcast(y, src=k % ws, async_op=True))
    for w in reversed(works):
        guard(f, "wait", w.wait)
    i = 0
    for k in range(30):
        want = torch.full((16,), float(ws * k + ws * (ws - 1) / 2))
        if not torch.equal(outs[i], want):
            f.append(f"async all_reduce {k}: {outs[i][:2].tolist()} != {want[:2].tolist()}")
        i += 1
        if k % 5 == 0:
            if not torch.equal(outs[i], torch.full((4,), float(k % ws))):
                f.append(f"async broadcast {k}: {outs[i].tolist()}")
            i += 1
    return f


@pytest.mark.parametrize("ws", [2, 3])
def test_async_work_and_futures(pools, ws):
    no_failures(pools.get(ws).run(task_async, 1.0))


# ---------------------------------------------------------------------------
# Timeouts: one process group per scenario, since a timeout breaks its group.


def _expect_timeout(f, what, fn, low, high):
    t0 = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        took = time.monotonic() - t0
        msg = str(e)
        # as torch's own tests match a timeout (test_barrier_timeout_*)
        if not re.search(" (Timed out|closed|timeout) ", msg):
            f.append(f"{what}: error does not say it timed out as torch's tests expect: {msg[:300]}")
        if not low <= took <= high:
            f.append(f"{what}: failed after {took:.2f}s, expected between {low} and {high}s")
        return msg
    f.append(f"{what}: did not fail")
    return None


def timeouts_rank(rank, ws):
    """Rank 0 calls ops rank 1 never joins, under each way to set a
    timeout; every group stays alive as long as needed."""
    import zipccl  # noqa: F401

    f: list[str] = []
    dist.init_process_group("zipccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=60))
    s = datetime.timedelta(seconds=1)
    g_default = dist.new_group(timeout=s)  # new_group(timeout=)
    g_perop = dist.new_group()  # the default (30 min); per-op options of 1 s
    g_set = dist.new_group()  # set_timeout(1 s)
    g_legacy = dist.new_group()  # _set_pg_timeout(1 s)
    g_barrier = dist.new_group()
    g_recv = dist.new_group(timeout=s)
    # torch 2.11 has no set_timeout, its _set_pg_timeout serves gloo and
    # nccl only, and custom backends expose no options: those parts need a
    # newer torch.
    settable = hasattr(dist, "set_timeout")
    if settable:
        dist.set_timeout(s, group=g_set)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.distributed_c10d._set_pg_timeout(s, group=g_legacy)
        perop_before = g_perop._get_backend(torch.device("cpu")).options._timeout
    dist.barrier()
    if rank == 0:
        _expect_timeout(f, "all_reduce, new_group(timeout=1s)", lambda: dist.all_reduce(torch.ones(3), group=g_default), 0.9, 5)
        opts = dist.AllreduceOptions()
        opts.timeout = s
        _expect_timeout(f, "allreduce with options.timeout=1s", lambda: g_perop.allreduce([torch.ones(3)], opts).wait(), 0.9, 5)
        if settable:
            _expect_timeout(f, "broadcast after set_timeout(1s)", lambda: dist.broadcast(torch.ones(3), src=0, group=g_set), 0.9, 5)
            _expect_timeout(f, "all_gather after _set_pg_timeout(1s)", lambda: dist.all_gather([torch.ones(3)] * ws, torch.ones(3), group=g_legacy), 0.9, 5)
        bopts = dist.BarrierOptions()
        bopts.timeout = s
        _expect_timeout(f, "barrier with options.timeout=1s", lambda: g_barrier.barrier(bopts).wait(), 0.9, 5)
        _expect_timeout(f, "recv with a 1s group timeout", lambda: dist.recv(torch.ones(3), src=1, group=g_recv), 0.9, 5)
        # The per-op timeout did not change the group's default.
        if settable and g_perop._get_backend(torch.device("cpu")).options._timeout != perop_before:
            f.append("a per-op timeout changed the group's timeout")
        if settable and g_set._get_backend(torch.device("cpu")).options._timeout != s:
            f.append(f"set_timeout not reflected in the backend options: {g_set._get_backend(torch.device('cpu')).options._timeout}")
    # The world group is still fine.
    t = torch.ones(2)
    dist.all_reduce(t)
    if t.tolist() != [float(ws)] * 2:
        f.append("the world group broke")
    # Finally the world group's own (init_process_group) timeout.
    if not settable:
        return f
    dist.set_timeout(datetime.timedelta(seconds=2))
    dist.barrier()
    if rank == 0:
        _expect_timeout(f, "all_reduce, world set_timeout(2s)", lambda: dist.all_reduce(torch.ones(3)), 1.9, 6)
    else:
        time.sleep(4)
    return f


def default_timeout_rank(rank, ws):
    """init_process_group(timeout=...) is the default of every op."""
    import zipccl  # noqa: F401

    f: list[str] = []
    dist.init_process_group("zipccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=1.5))
    dist.barrier()
    if rank == 0:
        _expect_timeout(f, "all_reduce, init_process_group(timeout=1.5s)", lambda: dist.all_reduce(torch.ones(3)), 1.4, 5)
    else:
        time.sleep(3)
    return f


def test_timeouts():
    from harness import spawn

    out = spawn(2, timeouts_rank, timeout=120)
    no_failures(out)


def test_init_process_group_timeout_is_the_default():
    from harness import spawn

    no_failures(spawn(2, default_timeout_rank, timeout=90))


# ---------------------------------------------------------------------------
# Profiler


PROFILED = [
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_into_tensor_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced",
    "all_to_all_single",
    "all_to_all",
    "gather",
    "scatter",
    "send",
    "recv",
    "recv_anysource",
    "barrier",
    "coalesced",
]


def task_profile(ctx):
    from torch.profiler import ProfilerActivity, profile

    ws, me = ctx.world_size, ctx.rank
    x = torch.ones(4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dist.all_reduce(x)
        dist.all_reduce_coalesced([x, torch.ones(2)])
        dist.broadcast(x, 0)
        dist.reduce(x, 0)
        dist.all_gather([torch.empty(4) for _ in range(ws)], x)
        dist.all_gather_into_tensor(torch.empty(4 * ws), x)
        dist.all_gather_coalesced([[torch.empty(4)] for _ in range(ws)], [x])
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.all_gather_into_tensor(torch.empty(4 * ws), x)
        cm.wait()
        dist.reduce_scatter(torch.empty(4), [torch.ones(4)] * ws)
        dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * ws))
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4 * ws))
        cm.wait()
        dist.all_to_all_single(torch.empty(4 * ws), torch.ones(4 * ws))
        dist.all_to_all([torch.empty(1) for _ in range(ws)], [torch.ones(1) for _ in range(ws)])
        dist.gather(x, [torch.empty(4) for _ in range(ws)] if me == 0 else None, dst=0)
        dist.scatter(torch.empty(4), [torch.ones(4)] * ws if me == 0 else None, src=0)
        if me == 0:
            dist.send(x, 1)
            dist.recv(x, 1)
            dist.recv(x)
        elif me == 1:
            dist.recv(x, 0)
            dist.send(x, 0)
            dist.send(x, 0)
        with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
            dist.broadcast(x, 0)
        cm.wait()
        dist.barrier()
    names = {e.key for e in prof.key_averages()}
    return sorted(n for n in names if n.startswith("zipccl:"))


@pytest.mark.parametrize("ws", [2])
def test_profiler_names(pools, ws):
    out = pools.get(ws).run(task_profile)
    missing = [n for n in PROFILED if f"zipccl:{n}" not in out[0]]
    assert not missing, f"missing from rank 0's trace: {missing}; found {out[0]}"
