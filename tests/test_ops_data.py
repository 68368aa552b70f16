"""The non-reducing collectives x every dtype, at world sizes 1-4, bit for
bit against references built from every rank's regenerated input:
broadcast, all_gather (list, also uneven sizes), all_gather_into_tensor
(flat and stacked outputs), all_gather_coalesced,
allgather_into_tensor_coalesced (coalescing manager with and without a
device, funcol), all_to_all_single (equal and uneven splits with zero-size
ones), all_to_all (lists), gather and scatter; with non-contiguous inputs
and outputs, empty tensors, sizes that take the ring/chain algorithms, and
complex tensors (which torch passes on as real views).

Inputs are raw random bytes, so floats include NaNs, infinities and
subnormals: anything but a bitwise copy fails.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from conftest import WORLD_SIZES
from refs import DTYPES, F8, check_exact, generator, guard, name, no_failures

# torch 2.15 renamed the funcol *_coalesced ops (the old names warn).
AG_COALESCED = getattr(funcol, "all_gather_single_coalesced", None) or funcol.all_gather_into_tensor_coalesced

SHAPE = (4, 6)
LARGE = 200_003  # 4-byte elements: > 256 KiB per rank


def data(seed: int, rank: int, shape, dtype: torch.dtype, salt: str = "") -> torch.Tensor:
    """Raw random bytes of dtype (bool: 0/1)."""
    g = generator(seed, rank, salt)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    size = torch.empty((), dtype=dtype).element_size()
    return torch.randint(0, 256, (math.prod(shape) * size,), dtype=torch.uint8, generator=g).view(dtype).reshape(shape)


def noncontig(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous (transposed) view, when t has
    two or more non-trivial dims; t itself otherwise."""
    if t.dim() < 2:
        return t
    v = t.transpose(0, 1).contiguous().transpose(0, 1)
    return v


def strided_zeros(shape, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(base, view): view has `shape`, is every other column of base."""
    shape = tuple(shape)
    base = torch.zeros(shape[:-1] + (2 * shape[-1],), dtype=dtype)
    return base, base[..., ::2]


# ---------------------------------------------------------------------------
# Tasks


def task_broadcast(ctx, seed, dtypes):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, dt in enumerate(dtypes):
        for src in range(ws):
            xs = [data(seed + i, r, SHAPE, dt, f"b{src}") for r in range(ws)]
            what = f"broadcast {name(dt)} src={src}"
            t = xs[me].clone()
            guard(f, what, lambda: dist.broadcast(t, src=src))
            check_exact(f, what, t, xs[src])
            tv = noncontig(xs[me].clone())
            guard(f, what + " (transposed)", lambda: dist.broadcast(tv, src=src))
            check_exact(f, what + " (transposed)", tv, xs[src])
    for dt in (torch.float32, torch.int8):
        src = ws - 1
        xs = [data(seed, r, (LARGE,), dt, "bl") for r in range(ws)]
        t = xs[me].clone()
        guard(f, f"broadcast large {name(dt)}", lambda: dist.broadcast(t, src=src))
        check_exact(f, f"broadcast large {name(dt)}", t, xs[src])
    t = torch.empty(0, dtype=torch.float32)
    guard(f, "broadcast of an empty tensor", lambda: dist.broadcast(t, src=0))
    return f


def task_broadcast_after_probe(ctx, seed, dtypes):
    """Once a compressible op of 1 MiB or more has made the group measure
    itself (and find every link on this host), broadcast runs a binomial
    tree of whole-buffer messages instead of the chain: every rank must
    reach that choice alike, for every root."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    t = torch.ones(1 << 20, dtype=torch.bfloat16)
    guard(f, "all_reduce 2 MiB (probe)", lambda: dist.all_reduce(t))
    for src in range(ws):
        for numel in (1 << 19, 3 * (1 << 18) + 7):
            xs = [data(seed + src, r, (numel,), torch.float32, "bt") for r in range(ws)]
            y = xs[me].clone()
            what = f"broadcast {numel} float32 src={src} after the probe"
            guard(f, what, lambda: dist.broadcast(y, src=src))
            check_exact(f, what, y, xs[src])
    return f


def task_all_gather(ctx, seed, dtypes):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, dt in enumerate(dtypes):
        xs = [data(seed + i, r, SHAPE, dt) for r in range(ws)]
        what = f"{{}} {name(dt)}"

        # List form, outputs strided views, input transposed.
        pairs = [strided_zeros(SHAPE, dt) for _ in range(ws)]
        outs = [v for _, v in pairs]
        guard(f, what.format("all_gather"), lambda: dist.all_gather(outs, noncontig(xs[me])))
        for r in range(ws):
            check_exact(f, what.format(f"all_gather[{r}]"), outs[r], xs[r])
            check_exact(f, what.format(f"all_gather[{r}] untouched"), pairs[r][0][..., 1::2], torch.zeros(SHAPE, dtype=dt))

        # Uneven sizes: rank r contributes r+1 rows.
        ys = [data(seed + i, r, (r + 1, 3), dt, "uneven") for r in range(ws)]
        outs = [torch.zeros((r + 1, 3), dtype=dt) for r in range(ws)]
        guard(f, what.format("all_gather uneven"), lambda: dist.all_gather(outs, ys[me]))
        for r in range(ws):
            check_exact(f, what.format(f"all_gather uneven[{r}]"), outs[r], ys[r])

        # Into one tensor: flat (ws*4, 6) and stacked (ws, 4, 6).
        want = torch.cat(xs)
        out = torch.zeros((ws * SHAPE[0], SHAPE[1]), dtype=dt)
        guard(f, what.format("all_gather_into_tensor"), lambda: dist.all_gather_into_tensor(out, xs[me]))
        check_exact(f, what.format("all_gather_into_tensor"), out, want)
        out = torch.zeros((ws,) + SHAPE, dtype=dt)
        guard(f, what.format("all_gather_into_tensor stacked"), lambda: dist.all_gather_into_tensor(out, noncontig(xs[me])))
        check_exact(f, what.format("all_gather_into_tensor stacked"), out, torch.stack(xs))
        base, view = strided_zeros((ws * SHAPE[0], SHAPE[1]), dt)
        guard(f, what.format("all_gather_into_tensor strided output"), lambda: dist.all_gather_into_tensor(view, xs[me]))
        check_exact(f, what.format("all_gather_into_tensor strided output"), view, want)
    for dt in (torch.float32, torch.uint8):
        xs = [data(seed, r, (LARGE,), dt, "agl") for r in range(ws)]
        out = torch.empty(ws * LARGE, dtype=dt)
        guard(f, f"all_gather_into_tensor large {name(dt)}", lambda: dist.all_gather_into_tensor(out, xs[me]))
        check_exact(f, f"all_gather_into_tensor large {name(dt)}", out, torch.cat(xs))
    out = [torch.empty(0) for _ in range(ws)]
    guard(f, "all_gather of empty tensors", lambda: dist.all_gather(out, torch.empty(0)))
    return f


def task_all_gather_coalesced(ctx, seed, dtypes):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    shapes = [SHAPE, (3,), (0,), (2, 1, 2)]
    for i, dt in enumerate(dtypes):
        per = [[data(seed + 10 * i + k, r, s, dt) for r in range(ws)] for k, s in enumerate(shapes)]
        what = f"{{}} {name(dt)}"

        # dist.all_gather_coalesced (deprecated, still offered), in torch's
        # layout (gloo's): one output list per rank, shaped like the inputs.
        outs = [[torch.zeros(s, dtype=dt) for s in shapes] for _ in range(ws)]
        ins = [noncontig(xs[me]) for xs in per]
        guard(f, what.format("all_gather_coalesced"), lambda: dist.all_gather_coalesced(outs, ins))
        for k, xs in enumerate(per):
            for r in range(ws):
                check_exact(f, what.format(f"all_gather_coalesced[{r}][{k}]"), outs[r][k], xs[r])
        # and gloo, given the same lists, fills them the same way (for the
        # dtypes it has)
        if dt not in F8 + (torch.int16,):
            ref = [[torch.zeros(s, dtype=dt) for s in shapes] for _ in range(ws)]
            failed = len(f)
            guard(f, what.format("all_gather_coalesced on gloo"),
                  lambda: dist.all_gather_coalesced(ref, [x.contiguous() for x in ins], group=ctx.gloo))
            for r in range(ws) if len(f) == failed else ():
                for k in range(len(shapes)):
                    check_exact(f, what.format(f"all_gather_coalesced[{r}][{k}] vs gloo"), outs[r][k], ref[r][k])

        # allgather_into_tensor_coalesced: coalescing manager, both paths.
        for device in (None, torch.device("cpu")):
            outs = [torch.zeros((ws * s[0],) + tuple(s[1:]), dtype=dt) for s in shapes]

            def run():
                with dist._coalescing_manager(device=device, async_ops=True) as cm:
                    for o, xs in zip(outs, per):
                        dist.all_gather_into_tensor(o, xs[me])
                cm.wait()

            label = f"coalesced all_gather_into_tensor (device={device})"
            guard(f, what.format(label), run)
            for k, xs in enumerate(per):
                check_exact(f, what.format(f"{label}[{k}]"), outs[k], torch.cat(xs))

        # funcol (what DTensor/FSDP2 call; even one tensor uses *_coalesced).
        label = f"funcol.{AG_COALESCED.__name__}"
        outs = guard(
            f,
            what.format(label),
            lambda: [funcol.wait_tensor(o) for o in AG_COALESCED([xs[me] for xs in per], dist.group.WORLD)],
        )
        if outs is not None:
            for k, xs in enumerate(per):
                check_exact(f, what.format(f"{label}[{k}]"), outs[k], torch.cat(xs))
    return f


def _splits(ws: int, seed: int) -> list[list[int]]:
    """rows[src][dst]: how many rows rank src sends to rank dst; some are 0."""
    g = generator(seed, -1, "splits")
    rows = torch.randint(0, 4, (ws, ws), generator=g)
    if ws > 1:
        rows[0, ws - 1] = 0
        rows[ws - 1, 0] = 0
    if ws > 2:
        rows[1, 1] = 0  # nothing to itself
    return rows.tolist()


def task_all_to_all(ctx, seed, dtypes):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    cols = 3
    for i, dt in enumerate(dtypes):
        what = f"{{}} {name(dt)}"
        # Equal splits: rank r's input has ws blocks of 2 rows.
        xs = [data(seed + i, r, (ws * 2, cols), dt) for r in range(ws)]
        want = torch.cat([xs[r][2 * me : 2 * me + 2] for r in range(ws)])
        out = torch.zeros((ws * 2, cols), dtype=dt)
        guard(f, what.format("all_to_all_single equal"), lambda: dist.all_to_all_single(out, xs[me]))
        check_exact(f, what.format("all_to_all_single equal"), out, want)
        # Strided output, transposed input.
        base, view = strided_zeros((ws * 2, cols), dt)
        guard(f, what.format("all_to_all_single non-contiguous"), lambda: dist.all_to_all_single(view, noncontig(xs[me])))
        check_exact(f, what.format("all_to_all_single non-contiguous"), view, want)

        # Uneven splits, including zero-size ones.
        rows = _splits(ws, seed + i)
        ys = [data(seed + i, r, (sum(rows[r]), cols), dt, "uneven") for r in range(ws)]

        def block(src, dst):
            start = sum(rows[src][:dst])
            return ys[src][start : start + rows[src][dst]]

        want = torch.cat([block(r, me) for r in range(ws)])
        out = torch.zeros((sum(rows[r][me] for r in range(ws)), cols), dtype=dt)
        in_splits = rows[me]
        out_splits = [rows[r][me] for r in range(ws)]
        guard(
            f,
            what.format(f"all_to_all_single uneven {rows}"),
            lambda: dist.all_to_all_single(out, ys[me], output_split_sizes=out_splits, input_split_sizes=in_splits),
        )
        check_exact(f, what.format(f"all_to_all_single uneven {rows}"), out, want)

        # Lists of tensors of per-pair sizes.
        ins = [noncontig(block(me, d).clone()) if block(me, d).numel() else block(me, d).clone() for d in range(ws)]
        outs = [torch.zeros((rows[s][me], cols), dtype=dt) for s in range(ws)]
        guard(f, what.format("all_to_all (lists)"), lambda: dist.all_to_all(outs, ins))
        for s in range(ws):
            check_exact(f, what.format(f"all_to_all (lists)[{s}]"), outs[s], block(s, me))
    # Large, equal splits.
    xs = [data(seed, r, (ws * LARGE,), torch.float32, "a2al") for r in range(ws)]
    out = torch.empty(ws * LARGE)
    guard(f, "all_to_all_single large", lambda: dist.all_to_all_single(out, xs[me]))
    check_exact(f, "all_to_all_single large", out, torch.cat([xs[r][me * LARGE : (me + 1) * LARGE] for r in range(ws)]))
    return f


def task_gather_scatter(ctx, seed, dtypes):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for i, dt in enumerate(dtypes):
        for root in range(ws):
            xs = [data(seed + i, r, SHAPE, dt, f"g{root}") for r in range(ws)]
            what = f"gather {name(dt)} dst={root}"
            outs = [strided_zeros(SHAPE, dt)[1] for _ in range(ws)] if me == root else None
            guard(f, what, lambda: dist.gather(noncontig(xs[me]), outs, dst=root))
            if me == root:
                for r in range(ws):
                    check_exact(f, f"{what}[{r}]", outs[r], xs[r])

            what = f"scatter {name(dt)} src={root}"
            chunks = [data(seed + i, r, SHAPE, dt, f"s{root}") for r in range(ws)]
            _, out = strided_zeros(SHAPE, dt)
            ins = [noncontig(c) for c in chunks] if me == root else None
            guard(f, what, lambda: dist.scatter(out, ins, src=root))
            check_exact(f, what, out, chunks[me])
    return f


def task_complex(ctx, seed):
    """torch sends complex tensors as real views; the results must be right."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    for dt in (torch.complex64, torch.complex128):
        xs = [data(seed, r, SHAPE, dt) for r in range(ws)]
        t = xs[me].clone()
        guard(f, f"broadcast {dt}", lambda: dist.broadcast(t, src=ws - 1))
        check_exact(f, f"broadcast {dt}", t, xs[ws - 1])
        outs = [torch.zeros(SHAPE, dtype=dt) for _ in range(ws)]
        guard(f, f"all_gather {dt}", lambda: dist.all_gather(outs, xs[me]))
        for r in range(ws):
            check_exact(f, f"all_gather {dt}[{r}]", outs[r], xs[r])
        out = torch.zeros((ws * 2,) + SHAPE[1:], dtype=dt)
        inp = torch.cat([xs[me][:2]] * ws)
        guard(f, f"all_to_all_single {dt}", lambda: dist.all_to_all_single(out, inp))
        check_exact(f, f"all_to_all_single {dt}", out, torch.cat([xs[r][:2] for r in range(ws)]))
        out = torch.zeros(SHAPE, dtype=dt)
        guard(f, f"scatter {dt}", lambda: dist.scatter(out, list(xs) if me == 0 else None, src=0))
        check_exact(f, f"scatter {dt}", out, xs[me])
        # Integer-valued parts: the sum is exact in any order.
        ys = [torch.complex(*(torch.randint(-50, 50, SHAPE, generator=generator(seed, r, s)).to(torch.float64) for s in "ri")).to(dt) for r in range(ws)]
        t = ys[me].clone()
        guard(f, f"all_reduce SUM {dt}", lambda: dist.all_reduce(t))
        check_exact(f, f"all_reduce SUM {dt}", t, sum(ys[1:], ys[0].clone()))
    return f


# ---------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_broadcast(pools, ws):
    no_failures(pools.get(ws).run(task_broadcast, 31, DTYPES))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_broadcast_after_probe(pools, ws):
    no_failures(pools.get(ws).run(task_broadcast_after_probe, 37, DTYPES))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_all_gather(pools, ws):
    no_failures(pools.get(ws).run(task_all_gather, 32, DTYPES))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_all_gather_coalesced(pools, ws):
    no_failures(pools.get(ws).run(task_all_gather_coalesced, 33, DTYPES))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_all_to_all(pools, ws):
    no_failures(pools.get(ws).run(task_all_to_all, 34, DTYPES))


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_gather_scatter(pools, ws):
    no_failures(pools.get(ws).run(task_gather_scatter, 35, DTYPES))


@pytest.mark.parametrize("ws", [1, 3])
def test_complex_tensors(pools, ws):
    no_failures(pools.get(ws).run(task_complex, 36))
