"""Invalid calls fail on the calling rank alone, before anything is sent:
unsupported reduce op x dtype combinations (BAND/BOR/BXOR on floats, AVG on
bool, PREMUL_SUM on integers and bool) for every reducing op, dtypes the
engine does not carry (uint16/32/64, the fnuz and e8m0 float8s) for every
op, complex tensors where torch hands them over as complex (reduce,
reduce_scatter, gather), and malformed calls (mixed dtypes, wrong sizes, bad roots).

Only rank 0 makes the bad calls. Each must raise a RuntimeError naming the
op and the problem; afterwards the engine's statistics on rank 0 must be
unchanged (nothing was submitted) and a collective on every rank must still
line up (had rank 0 consumed a sequence number, it would fail with a
mismatch instead)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import zipccl
from refs import FLOATS, INTS, name, redop

BAD_DTYPES = [torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float8_e8m0fnu]


def _unsupported_redops():
    for dt in FLOATS:
        for op in ("BAND", "BOR", "BXOR"):
            yield dt, op
    yield torch.bool, "AVG"
    for dt in INTS + (torch.bool,):
        for op in ("PREMUL_SUM", "PREMUL_SUM_TENSOR"):
            yield dt, op


def _reducing_calls(ws, dt, op):
    """(op name in messages, call) for every reducing op."""
    x = torch.ones(ws * 2, dtype=dt)
    rop = lambda: redop(op, torch.float32 if dt in INTS + (torch.bool,) else dt)  # noqa: E731
    return [
        ("all_reduce", lambda: dist.all_reduce(x.clone(), op=rop())),
        ("all_reduce", lambda: dist.all_reduce(x.clone(), op=rop(), async_op=True)),
        ("all_reduce", lambda: dist.all_reduce_coalesced([x.clone(), x[:3].clone()], op=rop())),
        ("reduce", lambda: dist.reduce(x.clone(), dst=0, op=rop())),
        ("reduce_scatter", lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=dt), x, op=rop())),
        ("reduce_scatter", lambda: dist.reduce_scatter(torch.empty(2, dtype=dt), list(x.chunk(ws)), op=rop())),
    ]


def _data_calls(ws, dt):
    x = torch.empty(ws * 2, dtype=dt)
    calls = [
        ("all_reduce", lambda: dist.all_reduce(x)),
        ("broadcast", lambda: dist.broadcast(x, src=0)),
        ("reduce", lambda: dist.reduce(x, dst=0)),
        ("all_gather", lambda: dist.all_gather(list(torch.empty(ws * 2 * ws, dtype=dt).chunk(ws)), x)),
        ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(torch.empty(ws * 2 * ws, dtype=dt), x)),
        ("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=dt), x)),
        ("all_to_all_single", lambda: dist.all_to_all_single(torch.empty_like(x), x)),
        ("all_to_all", lambda: dist.all_to_all(list(torch.empty_like(x).chunk(ws)), list(x.chunk(ws)))),
        ("gather", lambda: dist.gather(x, list(torch.empty(ws * 2 * ws, dtype=dt).chunk(ws)), dst=0)),
        ("scatter", lambda: dist.scatter(x, list(torch.empty(ws * 2 * ws, dtype=dt).chunk(ws)), src=0)),
    ]
    if ws > 1:
        calls += [
            ("send", lambda: dist.send(x, dst=1)),
            ("send", lambda: dist.isend(x, dst=1)),
            ("recv", lambda: dist.recv(x, src=1)),
            ("recv", lambda: dist.irecv(x, src=1)),
        ]
    return calls


def _complex_calls(ws):
    """Complex tensors: torch passes most collectives a real view (see
    test_ops_data.test_complex_tensors); these reach the backend as complex
    and are refused."""
    c = lambda n=4: torch.ones(n, dtype=torch.complex64)  # noqa: E731
    return [
        ("reduce", lambda: dist.reduce(c(), dst=0)),
        ("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(c(), c(4 * ws))),
        ("reduce_scatter", lambda: dist.reduce_scatter(c(), [c() for _ in range(ws)])),
        ("gather", lambda: dist.gather(c(), [c() for _ in range(ws)], dst=0)),
    ]


def _malformed_calls(ws):
    f32, f64 = torch.zeros(4), torch.zeros(4, dtype=torch.float64)
    # torch's Python layer checks dtypes for some calls: go to the process
    # group directly so the shim's own checks are what is tested.
    pg = dist.distributed_c10d._get_default_group()
    return [
        ("one dtype", lambda: pg._allgather_base(torch.zeros(4 * ws, dtype=torch.float64), f32)),
        ("one dtype", lambda: pg.alltoall_base(torch.zeros(4, dtype=torch.float64), f32, [], [], dist.AllToAllOptions())),
        ("one dtype", lambda: pg.allreduce_coalesced([f32, f64], dist.AllreduceCoalescedOptions())),
        ("group size", lambda: dist.all_gather_into_tensor(torch.zeros(4 * ws + 1), f32)),
        ("group size", lambda: dist.reduce_scatter_tensor(torch.zeros(3), torch.zeros(4 * ws))),
        ("split sizes", lambda: dist.all_to_all_single(torch.zeros(ws, 2), torch.zeros(ws, 2), [1] * ws, [2] + [1] * (ws - 1))),
        ("elements", lambda: dist.scatter(torch.zeros(3), [torch.zeros(4)] * ws, src=0)),
        ("elements", lambda: dist.gather(torch.zeros(3), [torch.zeros(4)] * ws, dst=0)),
        ("elements", lambda: dist.reduce_scatter(torch.zeros(3), [torch.zeros(4)] * ws)),
    ]


def _counts(stats):
    return {k: (v["count"], v["wire_bytes"]) for k, v in stats.get("ops", {}).items()}


def task_rejections(ctx):
    ws, me = ctx.world_size, ctx.rank
    problems: list[str] = []
    if me == 0:
        before = _counts(zipccl.stats())
        cases = []
        for dt, op in _unsupported_redops():
            for opname, call in _reducing_calls(ws, dt, op):
                want = "PREMUL_SUM" if op.startswith("PREMUL") else op
                cases.append((f"{opname} {op} on {name(dt)}", call, [opname, want, name(dt)]))
        for dt in BAD_DTYPES:
            for opname, call in _data_calls(ws, dt):
                cases.append((f"{opname} on {name(dt)}", call, [opname, "does not support dtype", name(dt)]))
        for opname, call in _complex_calls(ws):
            cases.append((f"{opname} on complex64", call, [opname, "does not support dtype", "ComplexFloat"]))
        for what, call in _malformed_calls(ws):
            cases.append((f"malformed: {what}", call, [what]))
        for what, call, needles in cases:
            try:
                call()
            except RuntimeError as e:
                msg = str(e)
                missing = [n for n in needles if n.lower() not in msg.lower()]
                if missing or "zipccl" not in msg:
                    problems.append(f"{what}: message lacks {missing or 'zipccl'}: {msg[:300]}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"{what}: raised {type(e).__name__} instead of RuntimeError: {str(e)[:200]}")
            else:
                problems.append(f"{what}: accepted")
        after = _counts(zipccl.stats())
        if after != before:
            problems.append(f"engine statistics changed, so something was submitted: {before} -> {after}")
    # Everyone, in step: nothing above consumed a sequence number.
    t = torch.arange(4.0) * (me + 1)
    dist.all_reduce(t)
    if not torch.equal(t, torch.arange(4.0) * (ws * (ws + 1) // 2)):
        problems.append(f"the group gives {t.tolist()} after the rejections")
    return problems


@pytest.mark.parametrize("ws", [1, 2, 3])
def test_rejected_before_sending(pools, ws):
    out = pools.get(ws).run(task_rejections)
    lines = [f"rank {r}: {p}" for r, ps in enumerate(out) for p in ps]
    assert not lines, f"{len(lines)} problems:\n" + "\n".join(lines[:40])


def task_unwritable_output(ctx):
    """An output whose elements share memory (expand()) cannot receive the
    result: the op itself runs (its peers are not left waiting), and the
    rank holding such a tensor gets a RuntimeError that says to clone().
    The group keeps working, also when only one rank made the mistake."""
    ws, me = ctx.world_size, ctx.rank
    problems = []

    def expect_clone_error(what, fn):
        try:
            fn()
            problems.append(f"{what}: accepted an expand()ed output")
        except RuntimeError as e:
            if "clone()" not in str(e) or "zipccl" not in str(e):
                problems.append(f"{what}: unclear message: {str(e)[:300]}")

    expect_clone_error("all_reduce into an expanded tensor", lambda: dist.all_reduce(torch.ones(1).expand(4)))
    if ws > 1:
        src = ws - 1
        t = torch.ones(1).expand(4) if me == 0 else torch.full((4,), float(me))
        if me == 0:
            expect_clone_error("broadcast into an expanded tensor (rank 0 only)", lambda: dist.broadcast(t, src=src))
        else:
            dist.broadcast(t, src=src)
            if t.tolist() != [float(src)] * 4:
                problems.append(f"broadcast on a rank with a proper tensor gave {t.tolist()}")
    t = torch.ones(3)
    dist.all_reduce(t)
    if t.tolist() != [float(ws)] * 3:
        problems.append(f"the group gives {t.tolist()} afterwards")
    return problems


@pytest.mark.parametrize("ws", [1, 3])
def test_unwritable_output_fails_only_its_rank(pools, ws):
    out = pools.get(ws).run(task_unwritable_output)
    lines = [f"rank {r}: {p}" for r, ps in enumerate(out) for p in ps]
    assert not lines, "\n".join(lines)
