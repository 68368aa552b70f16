"""Frameworks on CPU over zipccl, each compared with the same run over gloo
in the same processes on identical data, and with a non-distributed
reference computed locally:

* DDP (several buckets, BatchNorm buffers broadcast, unused parameters),
  with the built-in reducer and with comm hooks (a custom hook built on
  Work.get_future().then, and torch's allreduce/fp16 compress hooks);
* FSDP2 (torch.distributed.fsdp.fully_shard) on a CPU device mesh;
* torch.distributed.pipelining, 2 stages with ScheduleGPipe.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from refs import no_failures

STEPS = 4


def _data(step, rank, n=8):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, 16, generator=g), torch.randn(n, 4, generator=g)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.bn = nn.BatchNorm1d(32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 4)
        self.unused = nn.Linear(4, 4)  # never in the graph

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.bn(self.a(x))))))


def _close(f, what, a, b, rtol=1e-5, atol=1e-6):
    if not torch.allclose(a, b, rtol=rtol, atol=atol):
        f.append(f"{what}: max |diff| {(a - b).abs().max().item():.3g}")


def _custom_hook(group, bucket):
    """An all-reduce comm hook built on Work.get_future()."""
    buf = bucket.buffer()
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    n = dist.get_world_size(group)
    return fut.then(lambda f: f.value()[0].div_(n))


def _train_ddp(group, hook):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.002, find_unused_parameters=True)
    if hook == "custom":
        ddp.register_comm_hook(group, _custom_hook)
    elif hook == "allreduce":
        ddp.register_comm_hook(group, default_hooks.allreduce_hook)
    elif hook == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        x, y = _data(step, dist.get_rank())
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


def task_ddp(ctx, hook):
    f: list[str] = []
    ws = ctx.world_size
    zmodel, zlosses = _train_ddp(None, hook)  # the default (zipccl) group
    gmodel, glosses = _train_ddp(ctx.gloo, hook)
    tol = dict(rtol=1e-3, atol=1e-3) if hook == "fp16" else {}
    for (name, zp), (_, gp) in zip(zmodel.state_dict().items(), gmodel.state_dict().items()):
        _close(f, f"DDP[{hook}] {name}: zipccl vs gloo", zp.float(), gp.float(), **tol)
    _close(f, f"DDP[{hook}] losses", torch.tensor(zlosses), torch.tensor(glosses), **tol)
    # Non-distributed reference: the mean of every rank's loss, each on its
    # own batch (training-mode BatchNorm normalises per rank's batch).
    torch.manual_seed(0)
    ref = Net()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(ws):
            x, y = _data(step, r)
            (nn.functional.mse_loss(ref(x), y) / ws).backward()
        opt.step()
    for (name, zp), (_, rp) in zip(zmodel.state_dict().items(), ref.state_dict().items()):
        if "running" in name or "num_batches" in name:
            continue  # rank 0's buffers are broadcast each step in DDP
        _close(f, f"DDP[{hook}] {name}: zipccl vs local reference", zp.float(), rp.float(), **(tol or dict(rtol=1e-4, atol=1e-5)))
    # Every rank ends with the same parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in zmodel.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(ws)]
    dist.all_gather(gathered, flat, group=ctx.gloo)
    for r in range(ws):
        if not torch.equal(gathered[r], flat):
            f.append(f"DDP[{hook}]: rank {r}'s parameters differ")
    return f


@pytest.mark.parametrize("hook", ["builtin", "custom", "allreduce", "fp16"])
@pytest.mark.parametrize("ws", [2, 3])
def test_ddp_matches_gloo(pools, ws, hook):
    no_failures(pools.get(ws).run(task_ddp, hook))


# ---------------------------------------------------------------------------
# FSDP2


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(3)])
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.out(x)


def _train_fsdp(mesh, reshard):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Mlp()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(STEPS):
        x, y = _data(step, dist.get_rank())
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    return full, losses


def task_fsdp(ctx):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    f: list[str] = []
    ws = ctx.world_size
    zmesh = init_device_mesh("cpu", (ws,))
    if zmesh.get_group()._get_backend(torch.device("cpu")).name() != "zipccl":
        f.append("the device mesh does not use zipccl")
    gmesh = DeviceMesh.from_group(ctx.gloo, "cpu")
    for reshard in (True, False):
        zstate, zlosses = _train_fsdp(zmesh, reshard)
        gstate, glosses = _train_fsdp(gmesh, reshard)
        for k in zstate:
            _close(f, f"FSDP2 (reshard={reshard}) {k}: zipccl vs gloo", zstate[k], gstate[k])
        _close(f, f"FSDP2 (reshard={reshard}) losses", torch.tensor(zlosses), torch.tensor(glosses))
    # Local reference: the mean loss over all ranks' data.
    torch.manual_seed(0)
    ref = Mlp()
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(ws):
            x, y = _data(step, r)
            (nn.functional.mse_loss(ref(x), y) / ws).backward()
        opt.step()
    for k, v in ref.state_dict().items():
        _close(f, f"FSDP2 {k}: zipccl vs local reference", zstate[k], v, rtol=1e-4, atol=1e-5)
    return f


@pytest.mark.parametrize("ws", [2])
def test_fsdp2_matches_gloo(pools, ws):
    no_failures(pools.get(ws).run(task_fsdp))


# ---------------------------------------------------------------------------
# Pipelining


def _pipe_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def _pipe_batch(step):
    g = torch.Generator().manual_seed(77 + step)
    return torch.randn(16, 16, generator=g), torch.randn(16, 4, generator=g)


def _train_pipeline(group, n_micro=4):
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    rank = dist.get_rank(group)
    full = _pipe_model()
    part = full[:3] if rank == 0 else full[3:]
    stage = PipelineStage(part, rank, 2, torch.device("cpu"), group=group)
    schedule = ScheduleGPipe(stage, n_microbatches=n_micro, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(part.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        x, y = _pipe_batch(step)
        opt.zero_grad()
        if rank == 0:
            schedule.step(x)
        else:
            mb_losses = []
            schedule.step(target=y, losses=mb_losses)
            losses.append(torch.stack(mb_losses).mean().item())
        opt.step()
    return {k: v.detach().clone() for k, v in part.state_dict().items()}, losses


def task_pipeline(ctx):
    f: list[str] = []
    zstate, zlosses = _train_pipeline(None)
    gstate, glosses = _train_pipeline(ctx.gloo)
    for k in zstate:
        _close(f, f"pipeline {k}: zipccl vs gloo", zstate[k], gstate[k])
    if ctx.rank == 1:
        _close(f, "pipeline losses: zipccl vs gloo", torch.tensor(zlosses), torch.tensor(glosses))
    # Not pipelined: the whole model, full batches.
    ref = _pipe_model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    rlosses = []
    for step in range(STEPS):
        x, y = _pipe_batch(step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ref(x), y)
        loss.backward()
        opt.step()
        rlosses.append(loss.item())
    mine = ref[:3] if ctx.rank == 0 else ref[3:]
    for k, v in mine.state_dict().items():
        _close(f, f"pipeline {k}: zipccl vs not pipelined", zstate[k], v, rtol=1e-4, atol=1e-5)
    if ctx.rank == 1:
        _close(f, "pipeline losses vs not pipelined", torch.tensor(zlosses), torch.tensor(rlosses), rtol=1e-4, atol=1e-5)
        if len(zlosses) != STEPS:
            f.append(f"pipeline: {len(zlosses)} losses")
    return f


@pytest.mark.parametrize("ws", [2])
def test_pipelining_gpipe(pools, ws):
    no_failures(pools.get(ws).run(task_pipeline))
