"""all_reduce of sparse COO tensors (SUM), against gloo's, and DDP training
a model with a sparse embedding over zipccl against the same training over
gloo.

gloo sums the ranks' sparse tensors in rank order after all-gathering their
indices and values; zipccl does the same, so the two agree bit for bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from refs import check_exact, guard, no_failures


def _sparse(rank: int, ws: int, dtype: torch.dtype, dense: bool, empty: int) -> torch.Tensor:
    """Rank rank's gradient-like sparse tensor: rows overlap between ranks
    and within one (so sums of three and more happen, in an order the
    result depends on), rank `empty` has none, and the rows are not
    coalesced."""
    g = torch.Generator().manual_seed(100 + rank)
    nnz = 0 if rank == empty else 9 + 3 * rank
    rows = torch.randint(0, 6, (1, nnz), generator=g)
    shape = (nnz, 3) if dense else (nnz,)
    if dtype.is_floating_point:
        vals = torch.randn(shape, generator=g).to(dtype)
    else:
        vals = torch.randint(-50, 50, shape, generator=g).to(dtype)
    size = (8, 3) if dense else (8,)
    return torch.sparse_coo_tensor(rows, vals, size)


def task_sparse_all_reduce(ctx):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    cases = [(dt, dense, empty) for dt in (torch.float32, torch.float64, torch.int64, torch.bfloat16)
             for dense in (False, True) for empty in (-1, 1)]
    for dtype, dense, empty in cases:
        what = f"sparse all_reduce {dtype} {'with a dense dimension' if dense else '1-d'}"
        what += f", rank {empty} empty" if empty >= 0 else ""
        mine, ref = _sparse(me, ws, dtype, dense, empty), _sparse(me, ws, dtype, dense, empty)
        work = guard(f, what, lambda: dist.all_reduce(mine, async_op=True))
        if work is None:
            continue
        guard(f, f"{what} wait", work.wait)
        guard(f, f"{what} on gloo", lambda: dist.all_reduce(ref, group=ctx.gloo))
        got, want = mine.coalesce(), ref.coalesce()
        check_exact(f, f"{what} indices", got.indices(), want.indices())
        check_exact(f, f"{what} values", got.values(), want.values())
        result = work.result()
        if len(result) != 1 or not result[0].is_sparse:
            f.append(f"{what}: work.result() is not the sparse tensor")
    try:
        dist.all_reduce(_sparse(me, ws, torch.float32, False, -1), op=dist.ReduceOp.MAX)
        f.append("sparse all_reduce MAX: accepted (gloo refuses it too)")
    except (RuntimeError, ValueError) as e:
        if "SUM" not in str(e):
            f.append(f"sparse all_reduce MAX: unclear message: {str(e)[:200]}")
    return f


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(40, 6, sparse=True)
        self.out = torch.nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(x).mean(dim=1))


def task_ddp_sparse_embedding(ctx):
    """The same model, data and steps under DDP over zipccl and over gloo:
    the parameters must stay bit-identical (the embedding's gradient is
    sparse: DDP all-reduces it as such, and both backends sum the ranks'
    sparse tensors in rank order).

    The output layer is frozen. Its gradient is dense, and each backend
    sums dense tensors in its own order (gloo's ring, zipccl's own
    algorithms), so over three ranks a sum can differ in the last bit: it
    did on a CPU whose kernels computed other gradient bits (twenty-seventh
    session), and then everything trained after it differed too."""
    f: list[str] = []
    me = ctx.rank
    models = {}
    for name, group in (("zipccl", None), ("gloo", ctx.gloo)):
        torch.manual_seed(0)
        net = _Net()
        net.out.requires_grad_(False)
        ddp = torch.nn.parallel.DistributedDataParallel(net, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(7 + me)
        for _ in range(4):
            x = torch.randint(0, 40, (8, 5), generator=g)
            y = torch.randn(8, 1, generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            guard(f, f"DDP ({name}) backward", loss.backward)
            opt.step()
        models[name] = net
    for (pn, p), (_, q) in zip(models["zipccl"].named_parameters(), models["gloo"].named_parameters()):
        check_exact(f, f"DDP with a sparse embedding: {pn}", p.detach(), q.detach())
    return f


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_sparse_all_reduce_vs_gloo(pools, ws):
    no_failures(pools.get(ws).run(task_sparse_all_reduce))


def test_ddp_sparse_embedding_vs_gloo(pools):
    no_failures(pools.get(3).run(task_ddp_sparse_embedding))
