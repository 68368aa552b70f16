"""Opt-in lossy collectives: the policy API (zipccl.Options(lossy=...),
zipccl.set_lossy, ZIPCCL_LOSSY) and qwZ's int8 all_gather (into a tensor,
a list, uneven, coalesced), bit for bit against a NumPy reference of the
format's formulas (backend/quant), on every rank, at world sizes 2 to 4;
and FSDP2 training with it."""

from __future__ import annotations

import json

import pytest
from harness import launch

# Each rank regenerates every rank's shard, so it can check all of them.
# The shards hold: Gaussian blocks, a block whose absmax sits at both
# signs, rounding ties, an all-zero block, a NaN block, an Inf block (for
# float16 a value beyond its range), and a tail block.
WORKER = r"""
import datetime, hashlib, json, os, sys, numpy as np, torch, torch.distributed as dist, zipccl
B = 2048
rank = int(os.environ["RANK"])
opts = zipccl.Options(lossy={"all_gather": "int8"}, lossy_min_bytes=1024) if os.environ.get("BY_OPTION") else None
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=60), pg_options=opts)
world = dist.get_world_size()

def shard(r, dt):
    g = torch.Generator().manual_seed(100 + r)
    n = 5 * B + 37 * (r + 1)  # uneven across ranks? all_gather_into_tensor wants equal: trimmed below
    x = torch.randn(n, generator=g) * 0.02 * (r + 1)
    x[B:2 * B] = torch.linspace(-1, 1, B) * 3.0
    x[B + 5], x[B + 6] = 3.0, -3.0
    x[2 * B:2 * B + 9] = torch.tensor([127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -126])
    x[2 * B + 9:3 * B] = 0.0
    x[3 * B:4 * B] = 0.0
    x[3 * B + 17] = -0.0
    if r == world - 1:
        x[4 * B + 3] = float("nan")
    if r == 0:
        x[4 * B + 100] = float("inf")
    return x.to(dt)

def reference(t):
    # backend/quant's formulas with float32 NumPy arithmetic
    x = t.float().numpy().astype(np.float32)
    y = np.empty_like(x)
    for lo in range(0, x.size, B):
        b = x[lo:lo + B]
        if not np.all(np.isfinite(b)):
            y[lo:lo + B] = b
            continue
        am = np.float32(np.max(np.abs(b)))
        s = np.float32(am / np.float32(127))
        if am == 0:
            y[lo:lo + B] = np.float32(0)
            continue
        inv = np.float32(np.float32(127) / am)
        q = np.rint((b * inv).astype(np.float32)).astype(np.int8)
        assert np.all(q >= -127) and np.all(q <= 127)
        y[lo:lo + B] = q.astype(np.float32) * s
    out = torch.from_numpy(y).to(t.dtype)
    nonfin = ~torch.isfinite(t.float())
    for lo in range(0, x.size, B):  # exact blocks keep their bits (NaN payloads too)
        if bool(nonfin[lo:lo + B].any()):
            out[lo:lo + B] = t[lo:lo + B]
    return out

res = {"hash": {}, "checked": 0}
if not opts:
    zipccl.set_lossy(all_gather="int8", min_bytes=1024)
for dt in (torch.bfloat16, torch.float16, torch.float32):
    n = 5 * B + 37  # equal shards for all_gather_into_tensor
    shards = [shard(r, dt)[:n].clone() for r in range(world)]
    want = torch.cat([reference(s) for s in shards])
    out = torch.empty(world * n, dtype=dt)
    dist.all_gather_into_tensor(out, shards[rank].clone())
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8)), f"{dt} into_tensor differs from the NumPy reference"
    assert not torch.equal(out.view(torch.uint8), torch.cat(shards).view(torch.uint8)), "it was lossy"
    lst = [torch.empty(n, dtype=dt) for _ in range(world)]
    dist.all_gather(lst, shards[rank].clone())
    assert torch.equal(torch.cat(lst).view(torch.uint8), want.view(torch.uint8)), f"{dt} list differs"
    # uneven shards (all_gather's list form): every shard its own length
    un = [shard(r, dt) for r in range(world)]
    lst = [torch.empty(s.numel(), dtype=dt) for s in un]
    dist.all_gather(lst, un[rank].clone())
    for r in range(world):
        assert torch.equal(lst[r].view(torch.uint8), reference(un[r]).view(torch.uint8)), f"{dt} uneven shard {r}"
    # coalesced (FSDP's and DeepSpeed's form): two tensors in one group call
    from torch.distributed.distributed_c10d import _coalescing_manager
    pairs = [(torch.empty(world * n, dtype=dt), (s * 2).to(dt)) for s in (shards[rank], shards[rank] / 3)]
    with _coalescing_manager(async_ops=False):
        for o, i in pairs:
            dist.all_gather_into_tensor(o, i)
    for k, (o, i) in enumerate(pairs):
        mine = o[rank * n:(rank + 1) * n]
        assert torch.equal(mine.view(torch.uint8), reference(i).view(torch.uint8)), f"{dt} coalesced tensor {k}"
    res["hash"][str(dt)] = hashlib.sha256(out.view(torch.uint8).numpy().tobytes()).hexdigest()
    res["checked"] += 1
# exact: integers, small tensors, float64
for t in (torch.arange(4096, dtype=torch.int32) * (rank + 1), torch.randn(60), torch.randn(4096, dtype=torch.float64)):
    lst = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(lst, t)
    assert torch.equal(lst[rank], t), f"{t.dtype} {t.numel()} stays exact"
# lossless again
zipccl.set_lossy()
x = torch.randn(8192, dtype=torch.bfloat16)
lst = [torch.empty_like(x) for _ in range(world)]
dist.all_gather(lst, x)
assert torch.equal(lst[rank], x), "set_lossy() makes the group lossless"
st = zipccl.stats()
res["lossy_calls"] = st["ops"]["all_gather"]["lossy_calls"].get("int8", 0)
res["policy"] = st["lossy"]
print("RESULT", json.dumps(res), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def _results(res) -> list[dict]:
    outs = []
    for r in res:
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        assert r.returncode == 0 and line, f"rank {r.rank}: {r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        outs.append(json.loads(line[0][7:]))
    return outs


@pytest.mark.parametrize("world,by_option,hosts", [(2, True, None), (3, False, None), (4, True, None),
                                                  (4, False, "abab")])
def test_int8_all_gather_matches_numpy_reference_on_every_rank(world, by_option, hosts):
    # "abab": 2 hosts of 2 ranks (ZIPCCL_HOST_ID), the main parts gathered
    # on the rails, then inside the hosts
    env = {"BY_OPTION": "1"} if by_option else {}
    rank_env = (lambda r: {"ZIPCCL_HOST_ID": hosts[r]}) if hosts else None
    outs = _results(launch(WORKER, world, env=env, rank_env=rank_env, timeout=240))
    for o in outs:
        assert o["checked"] == 3
        assert o["lossy_calls"] == 15, "three dtypes x (into_tensor, list, uneven list, 2 coalesced)"
        assert o["policy"] == "lossless", "after set_lossy()"
    assert all(o["hash"] == outs[0]["hash"] for o in outs), "bitwise identical on every rank"


MISMATCH = r"""
import datetime, os, torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
errors = []
for bad in ({"all_gather": "int4"}, {"all_reduce": "fp8", "fp8_block": 2048}, {"all_gather": "int3"}, {"broadcast": "int8"}):
    try:
        zipccl.set_lossy(**bad)
        errors.append(f"{bad}: accepted")
    except ValueError as e:
        errors.append(str(e))
if rank == 1:
    zipccl.set_lossy(all_gather="int8")
x = torch.randn(1 << 16)
try:
    dist.all_gather([torch.empty_like(x) for _ in range(dist.get_world_size())], x)
    print("RESULT no error", flush=True)
except RuntimeError as e:
    print("RESULT", str(e).replace("\n", " "), flush=True)
for e in errors:
    print("REFUSED", e.replace("\n", " "), flush=True)
"""


def test_policy_mismatch_fails_every_rank_and_bad_modes_are_refused():
    res = launch(MISMATCH, 3, timeout=120)
    for r in res:
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        assert line, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
        assert "lossy policy int8" in line[0], f"rank {r.rank} must fail naming the policy: {line[0]}"
        refused = [x for x in r.stdout.splitlines() if x.startswith("REFUSED ")]
        assert len(refused) == 4
        assert "makes no sense" in refused[0]
        assert "fp8_block" in refused[1]
        assert "unknown mode" in refused[2]
        assert "unknown op" in refused[3]


ENV = r"""
import datetime, torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
sub = dist.new_group([0, 1])
x = torch.randn(1 << 15)
for g in (None, sub):
    lst = [torch.empty_like(x) for _ in range(2)]
    dist.all_gather(lst, x, group=g)
    assert not torch.equal(lst[dist.get_rank()], x), "ZIPCCL_LOSSY makes every group lossy"
print("RESULT", zipccl.stats()["lossy"], zipccl.stats(sub)["ops"]["all_gather"]["lossy_calls"]["int8"], flush=True)
dist.destroy_process_group()
"""


def test_environment_policy_warns_once_per_process():
    res = launch(ENV, 2, env={"ZIPCCL_LOSSY": "all_gather=int8"}, timeout=120)
    for r in res:
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        assert r.returncode == 0 and line, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
        assert line[0] == "RESULT all_gather=int8,min_bytes=65536 1"
        assert r.stderr.count("collectives of zipccl groups are lossy") == 1, r.stderr[-3000:]


def test_options_build_the_engine_spec():
    import zipccl

    o = zipccl.Options(lossy={"all_gather": "int8"}, lossy_min_bytes=4096)
    assert o.to_string() == "lossy=all_gather=int8,min_bytes=4096"
    assert zipccl.Options(lossy={}).to_string() == "lossy="
    with pytest.raises(ValueError, match="unknown op"):
        zipccl.Options(lossy={"gather": "int8"}).to_string()


TRAIN = r"""
import datetime, json, os, statistics, torch, torch.distributed as dist, zipccl
from zipccl.demo.corpus import load_corpus
from zipccl.demo.train import Trainer
torch.set_num_threads(1)
rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
timeout = datetime.timedelta(seconds=300)
dist.init_process_group("gloo", timeout=timeout)
exact = dist.new_group(backend="zipccl", timeout=timeout)
lossy = dist.new_group(backend="zipccl", timeout=timeout)
qgz = dist.new_group(backend="zipccl", timeout=timeout)
zipccl.set_lossy(lossy, all_gather="int8")
zipccl.set_lossy(qgz, all_gather="int8", reduce_scatter="int4")
cfg = {"steps": 100, "batch": 4, "comm_dtype": "mixed", "lr": 1e-3, "seed": 0,
       "model": {"d_model": 128, "n_layers": 2, "n_heads": 4, "seq_len": 64}}
corpus, _ = load_corpus(8 << 20)
runs = {"exact": Trainer("exact", "fsdp", "zipccl", exact, cfg, corpus, rank),
        "int8": Trainer("int8", "fsdp", "zipccl", lossy, cfg, corpus, rank),
        "int8_int4": Trainer("int8_int4", "fsdp", "zipccl", qgz, cfg, corpus, rank)}
losses = {k: [] for k in runs}
for step in range(cfg["steps"]):
    for k, t in runs.items():
        losses[k].append(t.step(step)[0])
out = {}
for k in runs:
    x = torch.tensor(losses[k][-10:], dtype=torch.float64).mean()
    dist.all_reduce(x)
    out[k] = x.item() / n
out["lossy_calls"] = zipccl.stats(lossy)["ops"]["all_gather"]["lossy_calls"].get("int8", 0)
out["exact_calls"] = zipccl.stats(exact)["ops"]["all_gather"]["lossy_calls"].get("int8", 0)
out["int4_calls"] = zipccl.stats(qgz)["ops"]["reduce_scatter"]["lossy_calls"].get("int4", 0)
out["int4_ops"] = zipccl.stats(qgz)["ops"]["reduce_scatter"]["count"]
print("RESULT", json.dumps(out), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.timeout(660)
def test_fsdp2_trains_with_int8_weights_and_int4_gradients():
    # FSDP2 on a small demo model, 4 ranks, 100 steps, bf16 parameters (same
    # seed and data) on three groups: exact; parameters all-gathered as
    # int8; and also gradients reduce-scattered as int4. The mean loss of
    # the last 10 steps: int8 within 0.5 % of exact, int8 + int4 within 2 %
    # (ZeRO++ reports +2.07 % for qwZ + qgZ + hpZ). The model is smaller
    # than the demo's: on a CPU without AVX512-BF16 a bf16 matmul runs
    # about 16x slower than an fp32 one (benchmarks/results/bf16-matmul),
    # and the demo's size took over 20 minutes there (this size: about 4).
    outs = _results(launch(TRAIN, 4, timeout=600))
    o = outs[0]
    assert o["lossy_calls"] > 0 and o["exact_calls"] == 0, o
    assert o["int4_calls"] > 0 and o["int4_calls"] == o["int4_ops"], o
    assert abs(o["int8"] - o["exact"]) <= 0.005 * o["exact"], o
    assert abs(o["int8_int4"] - o["exact"]) <= 0.02 * o["exact"], o
    print(f"final loss: exact {o['exact']:.5f}, int8 all_gather {o['int8']:.5f} "
          f"({(o['int8'] / o['exact'] - 1) * 100:+.3f} %), int8 + int4 reduce_scatter {o['int8_int4']:.5f} "
          f"({(o['int8_int4'] / o['exact'] - 1) * 100:+.3f} %)")
