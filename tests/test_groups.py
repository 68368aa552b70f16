"""Subgroups: new_group over a subset of ranks (excluding some; the
excluded ranks get NON_GROUP_MEMBER and their calls are no-ops), collectives
and p2p inside subgroups interleaved with world collectives, overlapping
groups, explicit backend and pg_options, and dist.split_group (partitions,
and a split that leaves ranks out)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import zipccl
from refs import check_exact, guard, no_failures


def _value(rank, k=0):
    return torch.tensor([rank + 1, 10 * (rank + 1) + k, -rank], dtype=torch.int64)


def task_new_group(ctx):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    # Every rank creates every group, in the same order (torch's rule).
    members = sorted({0, ws - 1})
    ends = dist.new_group(members, backend="zipccl")  # leaves out 1..ws-2
    odd = dist.new_group([r for r in range(ws) if r % 2 == 1] or [0])
    solo = dist.new_group([ws - 1], pg_options=zipccl.Options(extra={"note": "solo"}))

    for k in range(3):  # interleave world and subgroup ops
        if me in members:
            t = _value(me, k)
            guard(f, "all_reduce in [0, last]", lambda: dist.all_reduce(t, group=ends))
            check_exact(f, f"all_reduce in {members} round {k}", t, sum((_value(r, k) for r in members[1:]), _value(members[0], k)))
            b = _value(me, k)
            guard(f, "broadcast in [0, last]", lambda: dist.broadcast(b, src=ws - 1, group=ends))
            check_exact(f, "broadcast in [0, last] from the last rank (global rank)", b, _value(ws - 1, k))
            outs = [torch.zeros(3, dtype=torch.int64) for _ in members]
            guard(f, "all_gather in [0, last]", lambda: dist.all_gather(outs, _value(me, k), group=ends))
            for i, r in enumerate(members):
                check_exact(f, f"all_gather in {members}[{i}]", outs[i], _value(r, k))
            if len(members) == 2:
                # p2p inside the subgroup, by group rank.
                other = members[1 - members.index(me)]
                got = torch.zeros(3, dtype=torch.int64)
                w = dist.isend(_value(me, k), group=ends, group_dst=1 - members.index(me))
                guard(f, "recv in [0, last]", lambda: dist.recv(got, group=ends, group_src=1 - members.index(me)))
                w.wait()
                check_exact(f, "p2p in [0, last]", got, _value(other, k))
        else:
            if ends != dist.GroupMember.NON_GROUP_MEMBER:
                f.append(f"rank {me} is not in {members} but new_group returned {ends}")
            # A non-member's call is a no-op (torch warns), never a hang.
            t = _value(me, k)
            r = dist.all_reduce(t, group=ends)
            if r is not None:
                f.append("all_reduce on a group this rank is not in returned a work")
            check_exact(f, "non-member tensor unchanged", t, _value(me, k))
        w = torch.ones(2, dtype=torch.int32) * (me + 1)
        guard(f, "world all_reduce between subgroup ops", lambda: dist.all_reduce(w))
        check_exact(f, "world all_reduce", w, torch.ones(2, dtype=torch.int32) * (ws * (ws + 1) // 2))

    odd_members = [r for r in range(ws) if r % 2 == 1] or [0]
    if me in odd_members:
        t = _value(me)
        guard(f, "all_reduce in odd ranks", lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=odd))
        check_exact(f, "all_reduce MAX in odd ranks", t, torch.stack([_value(r) for r in odd_members]).max(0).values)
        if dist.get_world_size(odd) != len(odd_members):
            f.append(f"odd group size {dist.get_world_size(odd)}")
    if me == ws - 1:
        t = _value(me)
        guard(f, "all_reduce in a group of one", lambda: dist.all_reduce(t, group=solo))
        check_exact(f, "group of one", t, _value(me))
        be = solo._get_backend(torch.device("cpu"))
        if not isinstance(be, zipccl._C.ZipcclBackend):
            f.append(f"the subgroup's backend is {type(be)}")
    dist.barrier()
    return f


def task_split_group(ctx):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    evens = [r for r in range(ws) if r % 2 == 0]
    odds = [r for r in range(ws) if r % 2 == 1]
    parts = [evens] + ([odds] if odds else [])
    g = guard(f, "split_group into evens/odds", lambda: dist.split_group(split_ranks=parts))
    if g is None:
        return f
    mine = evens if me in evens else odds
    t = _value(me)
    guard(f, "all_reduce in the split", lambda: dist.all_reduce(t, group=g))
    check_exact(f, f"all_reduce in split {mine}", t, sum((_value(r) for r in mine[1:]), _value(mine[0])))
    if dist.get_world_size(g) != len(mine) or dist.get_rank(g) != mine.index(me):
        f.append(f"split group size/rank {dist.get_world_size(g)}/{dist.get_rank(g)} for {mine}")
    # A split that leaves the last rank out.
    if ws >= 2:
        kept = list(range(ws - 1))
        h = guard(f, "split_group leaving the last rank out", lambda: dist.split_group(split_ranks=[kept]))
        if me == ws - 1:
            if h != dist.GroupMember.NON_GROUP_MEMBER:
                f.append(f"a rank outside every split got {h}")
        elif h is not None:
            t = _value(me)
            guard(f, "all_reduce in the partial split", lambda: dist.all_reduce(t, group=h))
            check_exact(f, "partial split", t, sum((_value(r) for r in kept[1:]), _value(kept[0])))
    t = torch.ones(1)
    dist.all_reduce(t)
    if t.item() != ws:
        f.append("the parent group stopped working after splits")
    return f


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_new_group_subsets(pools, ws):
    no_failures(pools.get(ws).run(task_new_group))


@pytest.mark.parametrize("ws", [1, 2, 3, 4])
def test_split_group(pools, ws):
    import inspect

    if "No device associated with the default pg" in inspect.getsource(dist.split_group):
        pytest.skip(f"torch {torch.__version__} splits only a default group bound to a device (device_id=)")
    no_failures(pools.get(ws).run(task_split_group))


def _sockets() -> int:
    import os

    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def task_group_creation_cost(ctx):
    """Megatron's groups (tp 2, pp 2) and 40 plain ones, each new_group
    timed, with an all_reduce in every tensor-parallel group so the store
    still serves the connections made after them."""
    import time

    from zipccl.bench.groups import megatron_groups

    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    kinds = megatron_groups(ws, 2, 2)
    lists = [g for _, gs in kinds for g in gs] + [list(range(i % 2, ws, 2)) for i in range(40)]
    before = _sockets()
    slowest, made = 0.0, []
    for ranks in lists:
        t0 = time.perf_counter()
        made.append(dist.new_group(ranks))
        slowest = max(slowest, time.perf_counter() - t0)
    grown = _sockets() - before
    if slowest > 1.0:
        f.append(f"rank {me}: the slowest of {len(lists)} new_group calls took {slowest:.2f} s")
    # zipccl connects a group's pairs at its first op; creating one opens
    # nothing, and the store connection is one per process, not per group
    if grown > 2:
        f.append(f"rank {me}: creating {len(lists)} groups opened {grown} sockets")
    tp = [g for (ranks, g) in zip(lists, made) if ranks in dict(kinds)["tensor"] and me in ranks]
    for g in tp:
        t = torch.full((4,), float(me + 1))
        guard(f, "all_reduce in a tensor-parallel group", lambda: dist.all_reduce(t, group=g))
        want = float(sum(r + 1 for r in dist.get_process_group_ranks(g)))
        if not torch.equal(t, torch.full((4,), want)):
            f.append(f"rank {me}: all_reduce in a new group gave {t.tolist()}, want {want}")
    return f


def test_group_creation_is_cheap(pools):
    """Issue 25's stall: each group's backend cloned the store (a new TCP
    connection and a ping), and once the server held hundreds of them one
    creation in a few waited 5 s for its answer. A long-lived pool, as a
    training process that made many groups before."""
    no_failures(pools.get(4).run(task_group_creation_cost))
