"""TACO's fp8 through torch.distributed: all_reduce (the two-shot),
reduce_scatter and all_gather, bit for bit against the NumPy reference of
the format (tests/fp8_reference.py) composed as backend/lossy documents
it, at 2 and 4 ranks and on 2 hosts x 2 ranks (exact float32 sums inside a
host), bitwise identical on every rank, within TACO's error bounds against
float64, NaN and Inf reaching every rank, and the fp8_block option."""

from __future__ import annotations

import pytest
from harness import launch
from test_lossy import _results

WORKER = r"""
import datetime, hashlib, json, numpy as np, torch, torch.distributed as dist, zipccl
from fp8_reference import encode, decode, values, to_bits, from_bits
UNIT = 2048  # backend/lossy.Unit: shards and pieces are whole units
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
topo = zipccl.topology()
hier = len(topo) >= 2 and len(topo[0]) >= 2 and all(len(h) == len(topo[0]) for h in topo)
layout = topo if hier else [[r] for r in range(world)]
DT = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

def bits(t):
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()]).numpy().view(
        {4: np.uint32, 2: np.uint16}[t.element_size()])

def activations(r, n, dt, seed):
    # TP activations: Gaussian rows of log-normal scale, a few outliers; a
    # NaN on rank 1 and an Inf on rank 0 in odd seeds
    g = torch.Generator().manual_seed(100 * seed + r)
    x = torch.randn(n, generator=g) * torch.exp(torch.randn(n // 64 + 1, generator=g)).repeat_interleave(64)[:n]
    x[torch.randint(0, n, (n // 1000 + 1,), generator=g)] *= 50
    if seed % 2:
        if r == 1:
            x[n // 3] = float("nan")
        if r == 0:
            x[n - 5] = float("inf")
    return x.to(dt)

def coded(x32, dt, block):
    # x (float32 values of dt) coded as a message of dt: its float32 values
    main, exact = encode(to_bits(x32, dt), dt, block)
    return values(main, exact, dt)

def owner_sum(parts, j, dt, block):
    # parts[r]: rank r's contribution to shard j (float32 values of dt).
    # Host sums in local order (float32 messages), every host's but the
    # owner's coded once, added in host order; one hop: each rank's own
    # message of dt, the owner's exact.
    acc = None
    for ranks in layout:
        if len(ranks) > 1:
            s = None
            for r in ranks:
                s = parts[r].copy() if s is None else (s + parts[r]).astype(np.float32)
            if j not in ranks:
                s = coded(s, "float32", block)
        else:
            s = parts[ranks[0]] if j in ranks else coded(parts[ranks[0]], dt, block)
        acc = s.copy() if acc is None else (acc + s).astype(np.float32)
    return acc

def same(got, want, what):
    g, w = bits(got), bits(want)
    nan = np.isnan(got.float().numpy())
    assert np.array_equal(nan, np.isnan(want.float().numpy())), f"{what}: NaN positions"
    bad = int((g[~nan] != w[~nan]).sum())
    assert bad == 0, f"{what}: {bad} elements differ from the NumPy reference"

def rel_l2(got, ref):
    fin = torch.isfinite(ref)
    d = got.double()[fin] - ref[fin]
    return float(d.norm() / ref[fin].norm())

res = {"checked": 0, "hash": {}, "errors": {}}
for block in (256, 64):
    zipccl.set_lossy(all_reduce="fp8", reduce_scatter="fp8", all_gather="fp8", min_bytes=4096, fp8_block=block)
    for dt in (torch.bfloat16, torch.float32, torch.float16):
        name = DT[dt]
        for op, avg in ((dist.ReduceOp.SUM, False), (dist.ReduceOp.AVG, True)):
            seed = res["checked"] + 1
            # all_reduce: the two-shot, shards of whole units
            n = 3 * UNIT * world + 777
            xs = [activations(r, n, dt, seed) for r in range(world)]
            t = xs[rank].clone()
            dist.all_reduce(t, op=op)
            nb = (n + UNIT - 1) // UNIT
            want = torch.empty(n, dtype=dt)
            for j in range(world):
                lo, hi = min(n, nb * j // world * UNIT), min(n, nb * (j + 1) // world * UNIT)
                acc = owner_sum([from_bits(bits(x[lo:hi]), name) for x in xs], j, name, block)
                if avg:
                    acc = (acc / np.float32(world)).astype(np.float32)
                main, exact = encode(to_bits(acc, "float32"), "float32", block)
                want[lo:hi] = torch.from_numpy(values(main, exact, "float32")).to(dt)
            same(t, want, f"B{block} {name} all_reduce {op}")
            ref = sum(x.double() for x in xs) / (world if avg else 1)
            res["errors"][f"ar B{block} {name} {op}"] = e = rel_l2(t, ref)
            assert e <= 0.045, f"all_reduce error {e}"
            if seed % 2:
                assert torch.isnan(t[n // 3]) and torch.isinf(t[n - 5]), "NaN and Inf reach the output"
            res["hash"][f"{block}{name}{op}"] = hashlib.sha256(bits(t).tobytes()).hexdigest()
            # reduce_scatter_tensor
            m = 2 * UNIT + 301
            ins = [activations(r, world * m, dt, seed + 50) for r in range(world)]
            out = torch.empty(m, dtype=dt)
            dist.reduce_scatter_tensor(out, ins[rank].clone(), op=op)
            acc = owner_sum([from_bits(bits(x[rank * m:(rank + 1) * m]), name) for x in ins], rank, name, block)
            if avg:
                acc = (acc / np.float32(world)).astype(np.float32)
            same(out, torch.from_numpy(acc).to(dt), f"B{block} {name} reduce_scatter {op}")
            ref = sum(x[rank * m:(rank + 1) * m].double() for x in ins) / (world if avg else 1)
            assert rel_l2(out, ref) <= 0.03, f"reduce_scatter error {rel_l2(out, ref)}"
            res["checked"] += 1
        # all_gather_into_tensor (sequence parallelism): every shard, the
        # own one too, decoded from its fp8 message
        m = UNIT + 123
        shards = [activations(r, m, dt, 77) for r in range(world)]
        out = torch.empty(world * m, dtype=dt)
        dist.all_gather_into_tensor(out, shards[rank])
        want = torch.cat([torch.from_numpy(decode(*encode(bits(s), name, block), name).view(
            {4: np.int32, 2: np.int16}[s.element_size()])).view(dt) for s in shards])
        same(out, want, f"B{block} {name} all_gather")
        res["hash"][f"ag{block}{name}"] = hashlib.sha256(bits(out).tobytes()).hexdigest()
st = zipccl.stats()["ops"]
res["calls"] = {op: st[op]["lossy_calls"] for op in ("all_reduce", "reduce_scatter", "all_gather")}
res["hier"] = hier
print("RESULT", json.dumps(res), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.timeout(660)
@pytest.mark.parametrize("world,hosts", [(2, None), (4, None), (4, "aabb")])
def test_fp8_collectives_match_numpy_reference_on_every_rank(world, hosts):
    rank_env = (lambda r: {"ZIPCCL_HOST_ID": hosts[r]}) if hosts else None
    outs = _results(launch(WORKER, world, rank_env=rank_env, timeout=600))
    for o in outs:
        assert o["checked"] == 12
        assert o["hier"] == (hosts is not None)
        assert o["calls"] == {"all_reduce": {"fp8": 12}, "reduce_scatter": {"fp8": 12}, "all_gather": {"fp8": 6}}
    assert all(o["hash"] == outs[0]["hash"] for o in outs), "bitwise identical on every rank"
