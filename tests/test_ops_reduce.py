"""The reducing collectives x dtype x reduce op, at world sizes 1-4, against
references computed in Python from the same inputs (tests/refs.py):
all_reduce, all_reduce_coalesced (dist.all_reduce_coalesced and the
coalescing manager), reduce, reduce_scatter (list), reduce_scatter_tensor,
reduce_scatter_tensor_coalesced (coalescing manager, with and without a
device, and funcol).

Integer ops and "exact" float inputs are checked bit for bit; random floats
within rounding bounds, against gloo, bitwise equal on every rank and run to
run. Tensors are also passed as non-contiguous views (transposed inputs,
strided outputs) and in sizes that take the ring algorithms (> 256 KiB).

Every task records failures instead of raising, so a wrong result on one
rank never leaves the other ranks waiting in the next collective.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from conftest import WORLD_SIZES
from refs import (
    DTYPES,
    FLOATS,
    GLOO_FLOATS,
    REDOPS,
    check_close,
    check_exact,
    digest,
    error_bound,
    gen,
    guard,
    name,
    no_failures,
    redop,
    reduce_ref,
    supported,
)

# torch 2.15 renamed the funcol *_coalesced ops (the old names warn).
RS_COALESCED = getattr(funcol, "reduce_scatter_single_coalesced", None) or funcol.reduce_scatter_tensor_coalesced

SMALL = (5, 7)
CHUNK = (5, 3)  # one rank's block of a reduce-scatter
LARGE = 300_007  # elements: above every *DirectMax (256 KiB) for 1-byte types at 2 ranks
LARGE_CHUNK = 100_003

CASES = [(dt, op) for dt in DTYPES for op in REDOPS if supported(dt, op)]
RANDOM_OPS = ("SUM", "AVG", "PRODUCT", "PREMUL_SUM", "PREMUL_SUM_TENSOR")
LARGE_CASES = [
    (torch.float32, "SUM"),
    (torch.bfloat16, "SUM"),
    (torch.float16, "AVG"),
    (torch.float64, "PRODUCT"),
    (torch.int32, "SUM"),
    (torch.int64, "BXOR"),
    (torch.uint8, "MAX"),
    (torch.bool, "MIN"),
    (torch.float8_e4m3fn, "MAX"),
    (torch.float8_e5m2, "PREMUL_SUM"),
]


def _inputs(seed, ws, shape, dtype, op, mode="exact"):
    return [gen(seed, r, shape, dtype, op, mode) for r in range(ws)]


# ---------------------------------------------------------------------------
# Tasks (run on every rank)


def task_all_reduce(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, (dt, op) in enumerate(CASES):
        xs = _inputs(seed + i, ws, SMALL, dt, op)
        want = reduce_ref(xs, op)
        what = f"all_reduce {name(dt)} {op}"
        t = xs[me].clone()
        guard(f, what, lambda: dist.all_reduce(t, op=redop(op, dt)))
        check_exact(f, what, t, want)
        # Non-contiguous: a transposed view...
        tv = xs[me].t().contiguous().t()
        assert not tv.is_contiguous()
        guard(f, what + " (transposed)", lambda: dist.all_reduce(tv, op=redop(op, dt)))
        check_exact(f, what + " (transposed)", tv, want)
        # ...and every other column of a wider tensor, whose other columns
        # must stay untouched.
        wide = torch.stack([xs[me], xs[(me + 1) % ws]], dim=-1).reshape(SMALL[0], 2 * SMALL[1])
        before = wide.clone()
        view = wide[:, ::2]
        guard(f, what + " (strided)", lambda: dist.all_reduce(view, op=redop(op, dt)))
        check_exact(f, what + " (strided)", wide[:, ::2], want)
        check_exact(f, what + " (strided, untouched columns)", wide[:, 1::2], before[:, 1::2])
    # Empty tensors.
    for dt in (torch.float32, torch.int8, torch.bool):
        t = torch.empty(0, 3, dtype=dt)
        guard(f, f"all_reduce of an empty {name(dt)} tensor", lambda: dist.all_reduce(t))
    return f


def task_all_reduce_large(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, (dt, op) in enumerate(LARGE_CASES):
        xs = _inputs(seed + i, ws, (LARGE,), dt, op)
        want = reduce_ref(xs, op)
        t = xs[me].clone()
        guard(f, f"all_reduce large {name(dt)} {op}", lambda: dist.all_reduce(t, op=redop(op, dt)))
        check_exact(f, f"all_reduce large {name(dt)} {op}", t, want)
    return f


def task_all_reduce_random(ctx, seed, large):
    """Random floats: within rounding bounds of the exact value, close to
    gloo's result, identical on every rank (digests go back to the parent)
    and run to run."""
    f: list[str] = []
    digests = {}
    ws, me = ctx.world_size, ctx.rank
    shape = (LARGE,) if large else SMALL
    dtypes = (torch.float32, torch.bfloat16, torch.float8_e5m2) if large else FLOATS
    ops = ("SUM", "PREMUL_SUM") if large else RANDOM_OPS
    for i, dt in enumerate(dtypes):
        for j, op in enumerate(ops):
            xs = _inputs(seed + 100 * i + j, ws, shape, dt, op, "random")
            exact = reduce_ref(xs, op, "random")
            bound = error_bound(xs, op)
            what = f"all_reduce random {name(dt)} {op}{' large' if large else ''}"
            runs = []
            for _ in range(2):
                t = xs[me].clone()
                guard(f, what, lambda: dist.all_reduce(t, op=redop(op, dt, "random")))
                runs.append(t)
            check_close(f, what, runs[0], exact, bound)
            check_exact(f, what + " (second run, determinism)", runs[1], runs[0])
            digests[what] = digest(runs[0])
            if dt in GLOO_FLOATS and op in ("SUM", "PRODUCT"):
                g = xs[me].clone()
                dist.all_reduce(g, op=redop(op, dt), group=ctx.gloo)
                check_close(f, what + " (gloo's result, sanity)", g, exact, bound)
                check_close(f, what + " vs gloo", runs[0], g.double(), 2 * bound)
    return f, digests


def task_all_reduce_coalesced(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    shapes = [SMALL, (3,), (0,), (2, 2, 2)]
    for i, (dt, op) in enumerate(CASES):
        per = [_inputs(seed + 1000 * i + k, ws, s, dt, op) for k, s in enumerate(shapes)]
        wants = [reduce_ref(xs, op) for xs in per]
        what = f"{{}} {name(dt)} {op}"
        ts = [xs[me].clone() for xs in per]
        # The last tensor is a non-contiguous view.
        ts[0] = ts[0].t().contiguous().t()
        guard(f, what.format("all_reduce_coalesced"), lambda: dist.all_reduce_coalesced(ts, op=redop(op, dt)))
        for k, (t, w) in enumerate(zip(ts, wants)):
            check_exact(f, what.format(f"all_reduce_coalesced[{k}]"), t, w)
        # The coalescing manager's fast path (allreduce_coalesced), async.
        ts = [xs[me].clone() for xs in per]

        def cm_run():
            with dist._coalescing_manager(async_ops=True) as cm:
                for t in ts:
                    dist.all_reduce(t, op=redop(op, dt))
            cm.wait()

        guard(f, what.format("coalescing manager all_reduce"), cm_run)
        for k, (t, w) in enumerate(zip(ts, wants)):
            check_exact(f, what.format(f"coalescing manager all_reduce[{k}]"), t, w)
    return f


def task_float8_overflow(ctx):
    """float8 sums go through float32 and are rounded like torch's own
    conversion: e4m3fn saturates at +-448 (it has no infinity), e5m2
    overflows to +-inf. (torch 2.11's cast turns e4m3fn overflow into NaN
    where 2.15's saturates; zipccl saturates on every version, so the
    expectation clamps before casting.)"""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    cases = [
        (torch.float8_e4m3fn, [256.0, -256.0, 448.0, 16.0], "SUM"),
        (torch.float8_e4m3fn, [32.0, -32.0, 448.0, 0.5], "PRODUCT"),
        (torch.float8_e5m2, [40960.0, -57344.0, 1.0, 2.0], "SUM"),
        (torch.float8_e5m2, [512.0, -512.0, 2.0, 0.25], "PRODUCT"),
    ]
    for dt, vals, op in cases:
        xs = [torch.tensor(vals).to(dt) for _ in range(ws)]
        v = torch.tensor(vals, dtype=torch.float64)
        exact = v * ws if op == "SUM" else v**ws
        if dt == torch.float8_e4m3fn:
            exact = exact.clamp(-448.0, 448.0)
        want = exact.to(dt)  # torch's rounding of the exact value
        t = xs[me].clone()
        guard(f, f"float8 {op} overflow", lambda: dist.all_reduce(t, op=redop(op, dt)))
        check_exact(f, f"{name(dt)} {op} of {vals} x {ws}", t, want)
    return f


def task_reduce(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, (dt, op) in enumerate(CASES):
        dst = i % ws
        xs = _inputs(seed + i, ws, SMALL, dt, op)
        want = reduce_ref(xs, op) if me == dst else xs[me]
        what = f"reduce {name(dt)} {op} dst={dst}"
        t = xs[me].clone()
        guard(f, what, lambda: dist.reduce(t, dst=dst, op=redop(op, dt)))
        check_exact(f, what + (" (root)" if me == dst else " (non-root input must stay)"), t, want)
        tv = xs[me].t().contiguous().t()
        guard(f, what + " (transposed)", lambda: dist.reduce(tv, dst=dst, op=redop(op, dt)))
        check_exact(f, what + " (transposed)", tv, want)
    return f


def task_reduce_random(ctx, seed):
    f: list[str] = []
    digests = {}
    ws, me = ctx.world_size, ctx.rank
    for i, dt in enumerate(FLOATS):
        for j, op in enumerate(RANDOM_OPS):
            dst = (i + j) % ws
            xs = _inputs(seed + 100 * i + j, ws, SMALL, dt, op, "random")
            what = f"reduce random {name(dt)} {op} dst={dst}"
            runs = []
            for _ in range(2):
                t = xs[me].clone()
                guard(f, what, lambda: dist.reduce(t, dst=dst, op=redop(op, dt, "random")))
                runs.append(t)
            check_exact(f, what + " (determinism)", runs[1], runs[0])
            if me == dst:
                check_close(f, what, runs[0], reduce_ref(xs, op, "random"), error_bound(xs, op))
                digests[what] = digest(runs[0])
    return f, digests


def _rs_inputs(seed, ws, dt, op, mode="exact", chunk=CHUNK):
    """Rank r's full input, shape (ws, *chunk): block k goes to rank k."""
    return _inputs(seed, ws, (ws,) + tuple(chunk), dt, op, mode)


def task_reduce_scatter(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, (dt, op) in enumerate(CASES):
        xs = _rs_inputs(seed + i, ws, dt, op)
        want = reduce_ref(xs, op)[me]
        rop = redop(op, dt)
        mine = xs[me]
        what = f"{{}} {name(dt)} {op}"

        # List form; the inputs are transposed views, the output a strided one.
        ins = [mine[k].t().contiguous().t() for k in range(ws)]
        out_base = torch.zeros((CHUNK[0], 2 * CHUNK[1]), dtype=dt)
        out = out_base[:, ::2]
        guard(f, what.format("reduce_scatter"), lambda: dist.reduce_scatter(out, ins, op=rop))
        check_exact(f, what.format("reduce_scatter"), out, want)
        check_exact(f, what.format("reduce_scatter (untouched)"), out_base[:, 1::2], torch.zeros((CHUNK[0], CHUNK[1]), dtype=dt))

        # Tensor form: input (ws*5, 3) -> output (5, 3).
        inp = mine.reshape(ws * CHUNK[0], CHUNK[1]).clone()
        out = torch.zeros(CHUNK, dtype=dt)
        guard(f, what.format("reduce_scatter_tensor"), lambda: dist.reduce_scatter_tensor(out, inp, op=rop))
        check_exact(f, what.format("reduce_scatter_tensor"), out, want)
        check_exact(f, what.format("reduce_scatter_tensor (input kept)"), inp, mine.reshape(ws * CHUNK[0], CHUNK[1]))
    return f


def task_reduce_scatter_coalesced(ctx, seed):
    """reduce_scatter_tensor_coalesced through the coalescing manager (fast
    path, and start/endCoalescing with a device) and funcol."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    chunks = [CHUNK, (4,), (1, 1)]
    for i, (dt, op) in enumerate(CASES):
        per = [_rs_inputs(seed + 1000 * i + k, ws, dt, op, chunk=c) for k, c in enumerate(chunks)]
        wants = [reduce_ref(xs, op)[me] for xs in per]
        rop = redop(op, dt)
        what = f"{{}} {name(dt)} {op}"
        for device in (None, torch.device("cpu")):
            outs = [torch.zeros(c, dtype=dt) for c in chunks]
            ins = [xs[me].reshape((ws * c[0],) + tuple(c[1:])).clone() for xs, c in zip(per, chunks)]

            def run():
                with dist._coalescing_manager(device=device, async_ops=True) as cm:
                    for o, x in zip(outs, ins):
                        dist.reduce_scatter_tensor(o, x, op=rop)
                cm.wait()

            label = f"coalesced reduce_scatter_tensor (device={device})"
            guard(f, what.format(label), run)
            for k, (o, w) in enumerate(zip(outs, wants)):
                check_exact(f, what.format(f"{label}[{k}]"), o, w)
        if op in ("SUM", "AVG", "PRODUCT", "MIN", "MAX") and not (op == "AVG" and dt == torch.bool):
            ins = [xs[me].reshape((ws * c[0],) + tuple(c[1:])).clone() for xs, c in zip(per, chunks)]
            label = f"funcol.{RS_COALESCED.__name__}"
            outs = guard(
                f,
                what.format(label),
                lambda: [
                    funcol.wait_tensor(o)
                    for o in RS_COALESCED(ins, op.lower(), [0] * len(ins), dist.group.WORLD)
                ],
            )
            if outs is not None:
                for k, (o, w) in enumerate(zip(outs, wants)):
                    check_exact(f, what.format(f"{label}[{k}]"), o, w)
    return f


def task_reduce_scatter_large(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, (dt, op) in enumerate(LARGE_CASES):
        xs = _rs_inputs(seed + i, ws, dt, op, chunk=(LARGE_CHUNK,))
        want = reduce_ref(xs, op)[me]
        out = torch.empty(LARGE_CHUNK, dtype=dt)
        what = f"reduce_scatter_tensor large {name(dt)} {op}"
        guard(f, what, lambda: dist.reduce_scatter_tensor(out, xs[me].reshape(-1), op=redop(op, dt)))
        check_exact(f, what, out, want)
    return f


def task_reduce_scatter_random(ctx, seed):
    f: list[str] = []
    digests = {}
    ws, me = ctx.world_size, ctx.rank
    for i, dt in enumerate(FLOATS):
        for j, op in enumerate(RANDOM_OPS):
            xs = _rs_inputs(seed + 100 * i + j, ws, dt, op, "random")
            exact = reduce_ref(xs, op, "random")[me]
            bound = error_bound(xs, op)[me]
            what = f"reduce_scatter_tensor random {name(dt)} {op}"
            runs = []
            for _ in range(2):
                out = torch.empty(CHUNK, dtype=dt)
                guard(f, what, lambda: dist.reduce_scatter_tensor(out, xs[me].reshape(-1, CHUNK[1]), op=redop(op, dt, "random")))
                runs.append(out)
            check_close(f, what, runs[0], exact, bound)
            check_exact(f, what + " (determinism)", runs[1], runs[0])
            digests[what] = digest(runs[0])
            if dt in GLOO_FLOATS and op == "SUM":
                g = torch.empty(CHUNK, dtype=dt)
                # gloo has no reduce_scatter_tensor on CPU: reduce_scatter (list).
                dist.reduce_scatter(g, list(xs[me].unbind(0)), group=ctx.gloo)
                check_close(f, what + " vs gloo", runs[0], g.double(), 2 * bound)
    return f, digests


# ---------------------------------------------------------------------------
# Tests (parent side)


def _split(results):
    """(failures by rank, digests by rank) from tasks returning both."""
    return [r[0] for r in results], [r[1] for r in results]


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_all_reduce_exact(pools, ws):
    no_failures(pools.get(ws).run(task_all_reduce, 11))


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_all_reduce_large_exact(pools, ws):
    no_failures(pools.get(ws).run(task_all_reduce_large, 12))


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_all_reduce_random_vs_gloo_and_deterministic(pools, ws, large):
    if large and ws == 1:
        pytest.skip("a group of one moves no data")
    fails, digests = _split(pools.get(ws).run(task_all_reduce_random, 13, large))
    no_failures(fails)
    for r in range(1, ws):
        assert digests[r] == digests[0], f"rank {r}'s results differ in bits from rank 0's"


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_all_reduce_coalesced(pools, ws):
    no_failures(pools.get(ws).run(task_all_reduce_coalesced, 14))


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_float8_saturation(pools, ws):
    no_failures(pools.get(ws).run(task_float8_overflow))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_reduce(pools, ws):
    no_failures(pools.get(ws).run(task_reduce, 15))


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_reduce_random_deterministic(pools, ws):
    fails, _ = _split(pools.get(ws).run(task_reduce_random, 16))
    no_failures(fails)


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_reduce_scatter(pools, ws):
    no_failures(pools.get(ws).run(task_reduce_scatter, 17))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_reduce_scatter_tensor_coalesced(pools, ws):
    no_failures(pools.get(ws).run(task_reduce_scatter_coalesced, 18))


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_reduce_scatter_large_exact(pools, ws):
    no_failures(pools.get(ws).run(task_reduce_scatter_large, 19))


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_reduce_scatter_random_vs_gloo(pools, ws):
    fails, _ = _split(pools.get(ws).run(task_reduce_scatter_random, 20))
    no_failures(fails)
