"""Future callbacks that wait for another zipccl work. torch runs .then()
callbacks on the thread that completes the future, one of zipccl's
completion threads; a callback that blocks there must not stop the work it
waits for (or any error or timeout) from completing. torch's PowerSGD hook
waits inside such a callback: on zipccl it used to hang for good."""

from __future__ import annotations

from harness import launch, result_lines

WAIT_IN_CALLBACK = r"""
import datetime, torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
world = dist.get_world_size()
a, b = torch.ones(1000), torch.full((1000,), 2.0)
def cb(f):
    # issued and waited for inside the callback of a's all_reduce: every
    # rank issues a, then b, in that order
    return dist.all_reduce(b, async_op=True).get_future().wait()[0]
out = dist.all_reduce(a, async_op=True).get_future().then(cb).wait()
print("RESULT", float(a.sum()), float(out.sum()), flush=True)
dist.destroy_process_group()
"""


def test_a_callback_may_wait_for_another_work():
    for line in result_lines(launch(WAIT_IN_CALLBACK, 2, timeout=90)):
        assert line.split() == ["2000.0", "4000.0"], line


POWERSGD = r"""
import datetime, hashlib, torch, torch.distributed as dist, zipccl
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=20))
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
ddp = DDP(model, bucket_cap_mb=0.3)  # several buckets
ddp.register_comm_hook(PowerSGDState(None, matrix_approximation_rank=4, start_powerSGD_iter=2), powerSGD_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(dist.get_rank())
try:
    for step in range(10):
        loss = ddp(torch.randn(32, 256, generator=gen)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    print("RESULT ok", hashlib.sha256(params.numpy().tobytes()).hexdigest(), flush=True)
except RuntimeError as e:
    # torch nests the error once per callback level, each with a traceback:
    # report zipccl's own message, wherever the nesting put it
    msg = str(e).replace("\n", " ")
    print("RESULT error", msg[max(msg.rfind("zipccl:"), 0):], flush=True)
"""


def test_torch_powersgd_hook_finishes_or_fails_on_every_rank():
    # torch's hook issues its second all-reduce from a callback, so the
    # ranks' orders may differ (gloo aborts with a size mismatch); what
    # zipccl owes is an answer on every rank: identical parameters, or a
    # RuntimeError naming the mismatch, within the timeout, never a hang.
    lines = result_lines(launch(POWERSGD, 2, timeout=120))
    if all(x.startswith("ok") for x in lines):
        assert lines[0] == lines[1], lines
    else:
        assert all(x.startswith("error") and "disagree" in x for x in lines), lines
