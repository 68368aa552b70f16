"""Opt-in lossy reductions: qgZ's int4 reduce_scatter and the int8/int4
two-shot all_reduce, bit for bit against a NumPy reference of the
formulas and the reduction order (backend/lossy, backend/quant), at world
sizes 2 to 4 and on 2 hosts x 2 ranks (exact float32 sums inside a host,
one quantization of each host's partial sum across), within the error
bound of the stages against float64; and FSDP2 training with int4
gradients."""

from __future__ import annotations

import pytest
from harness import launch
from test_lossy import _results

WORKER = r"""
import datetime, hashlib, json, os, numpy as np, torch, torch.distributed as dist, zipccl
from torch.distributed.distributed_c10d import _coalescing_manager
B = 2048
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
topo = zipccl.topology()
hier = len(topo) >= 2 and len(topo[0]) >= 2 and all(len(h) == len(topo[0]) for h in topo)
layout = topo if hier else [[r] for r in range(world)]

def contribution(r, numel, dt, seed, period):
    # Gaussian values of varying scale; in every segment of period elements
    # (a shard, or the whole tensor), block 1 holds rounding ties (absmax
    # 7 * 2^r: x * inv is exact, so int4 meets true ties when a rank's
    # contribution is coded alone) and block 3 is zero; a NaN and an Inf
    # in some.
    g = torch.Generator().manual_seed(1000 * seed + r)
    x = torch.randn(numel, generator=g) * torch.exp(torch.randn(numel, generator=g))
    ties = torch.tensor([7, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -6.5, 6.5]) * 2.0 ** r
    for s0 in range(0, numel, period):
        x[s0 + B:s0 + 2 * B] = 0.0
        x[s0 + B:s0 + B + 10] = ties
        x[s0 + 3 * B:s0 + 4 * B] = 0.0
        if r == 1 and seed % 2:
            x[s0 + 2 * B + 5] = float("nan")
        if r == 0 and seed % 3 == 0:
            x[s0 + period - 2] = float("inf")
    return x.to(dt)

def deq(x, qmax):
    # backend/quant's formulas, float32 NumPy arithmetic; NaN/Inf blocks
    # exact; the mode's block (backend/lossy.BlockOf)
    y = x.copy()
    qm = np.float32(qmax)
    QB = QBLOCK[qmax]
    for lo in range(0, x.size, QB):
        b = x[lo:lo + QB]
        if not np.all(np.isfinite(b)):
            continue
        am = np.float32(np.max(np.abs(b)))
        if am == 0:
            y[lo:lo + QB] = 0
            continue
        s, inv = np.float32(am / qm), np.float32(qm / am)
        q = np.rint((b * inv).astype(np.float32)).astype(np.int8).astype(np.float32)  # codes: integers, no -0
        assert np.all(np.abs(q) <= qmax)
        y[lo:lo + QB] = (q * s).astype(np.float32)
    return y

def owner_sum(parts, j, qmax):
    # parts[r]: rank r's contribution to shard j (float32). Host sums in
    # local order; every host's sum but the owner's coded once; added in
    # host order.
    acc = None
    for ranks in layout:
        s = None
        for r in ranks:
            s = parts[r].copy() if s is None else (s + parts[r]).astype(np.float32)
        if j not in ranks:
            s = deq(s, qmax)
        acc = s if acc is None else (acc + s).astype(np.float32)
    return acc

def f32(t):
    return t.float().numpy().astype(np.float32)

def same(got, want, what):
    g, w = got.float(), want.float()
    assert torch.equal(torch.isnan(g), torch.isnan(w)), f"{what}: NaN positions"
    m = ~torch.isnan(g)
    assert torch.equal(got[m], want[m]), f"{what}: differs from the NumPy reference at {int((got[m] != want[m]).sum())} elements"
    gb, wb = got[m].contiguous().view(torch.uint8), want[m].contiguous().view(torch.uint8)
    assert torch.equal(gb, wb), f"{what}: bits differ (signed zeros?)"

QMAX = {"int8": 127, "int4": 7}
QBLOCK = {127: 2048, 7: 256}  # elements per scale, by qmax
res = {"checked": 0, "hash": {}}
m = 3 * B + 1001  # odd, not a multiple of 2*world
for dt in (torch.bfloat16, torch.float16, torch.float32):
    for mode in ("int4", "int8"):
        zipccl.set_lossy(reduce_scatter=mode, all_reduce=mode, min_bytes=1024)
        qmax = QMAX[mode]
        for op, avg in ((dist.ReduceOp.SUM, False), (dist.ReduceOp.AVG, True)):
            seed = res["checked"] + 1
            # reduce_scatter_tensor: every rank's whole input regenerated here
            ins = [contribution(r, world * m, dt, seed, m) for r in range(world)]
            out = torch.empty(m, dtype=dt)
            dist.reduce_scatter_tensor(out, ins[rank].clone(), op=op)
            acc = owner_sum([f32(x[rank * m:(rank + 1) * m]) for x in ins], rank, qmax)
            if avg:
                acc = (acc / np.float32(world)).astype(np.float32)
            want = torch.from_numpy(acc).to(dt)
            same(out, want, f"{dt} {mode} reduce_scatter_tensor {op}")
            # against float64: the cross-host codings' bound
            ref = sum(x[rank * m:(rank + 1) * m].double() for x in ins) / (world if avg else 1)
            fin = torch.isfinite(ref)
            bound = torch.zeros(m, dtype=torch.float64)
            for ranks in layout:
                if rank in ranks:
                    continue
                hs = sum(ins[r][rank * m:(rank + 1) * m].double() for r in ranks)
                QB = QBLOCK[qmax]
                for lo in range(0, m, QB):
                    blk = hs[lo:lo + QB]
                    am = blk.abs().max() if bool(torch.isfinite(blk).all()) else 0.0
                    bound[lo:lo + QB] += 0.5 * am / qmax
            # plus float32 sums and the rounding to dt (of the output, which
            # the coding moved from ref)
            bound = bound / (world if avg else 1) * (1 + 1e-3) + torch.maximum(ref.abs(), out.double().abs()) * 2.0 ** -7
            err = (out.double() - ref).abs()
            assert bool((err[fin] <= bound[fin]).all()), f"{dt} {mode}: error {float((err - bound)[fin].max())} over the bound"
            # the list form (uneven lengths are not a reduce_scatter)
            outl = torch.empty(m, dtype=dt)
            dist.reduce_scatter(outl, list(ins[rank].clone().chunk(world)), op=op)
            same(outl, want, f"{dt} {mode} reduce_scatter list {op}")
            # coalesced: two tensors in one group call (FSDP's form)
            pairs = [(torch.empty(m, dtype=dt), ins[rank].clone()), (torch.empty(m, dtype=dt), (ins[rank] * 3).to(dt))]
            with _coalescing_manager(async_ops=False):
                for o, i in pairs:
                    dist.reduce_scatter_tensor(o, i, op=op)
            same(pairs[0][0], want, f"{dt} {mode} coalesced reduce_scatter {op}")
            # all_reduce: the lossy two-shot
            n = 5 * B + 3
            xs = [contribution(r, n, dt, seed + 7, n) for r in range(world)]
            t = xs[rank].clone()
            dist.all_reduce(t, op=op)
            nb = (n + B - 1) // B
            want = torch.empty(n, dtype=dt)
            for j in range(world):
                lo, hi = min(n, nb * j // world * B), min(n, nb * (j + 1) // world * B)
                acc = owner_sum([f32(x[lo:hi]) for x in xs], j, qmax)
                if avg:
                    acc = (acc / np.float32(world)).astype(np.float32)
                want[lo:hi] = torch.from_numpy(deq(acc, qmax)).to(dt)
            same(t, want, f"{dt} {mode} all_reduce {op}")
            res["hash"][f"{dt}{mode}{op}"] = hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()
            res["checked"] += 1
# exact under the policy: MAX, integers, small tensors
x = contribution(rank, 1 << 15, torch.float32, 98, 1 << 15)
t = x.clone()
dist.all_reduce(t, op=dist.ReduceOp.MAX)
assert torch.equal(t, torch.stack([contribution(r, 1 << 15, torch.float32, 98, 1 << 15) for r in range(world)]).max(0).values), "MAX stays exact"
i = torch.arange(1 << 15, dtype=torch.int64) * (rank + 1)
dist.all_reduce(i)
assert torch.equal(i, torch.arange(1 << 15, dtype=torch.int64) * (world * (world + 1) // 2)), "integers stay exact"
st = zipccl.stats()["ops"]
res["rs_calls"] = st["reduce_scatter"]["lossy_calls"]
res["ar_calls"] = st["all_reduce"]["lossy_calls"]
res["hier"] = hier
print("RESULT", json.dumps(res), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.timeout(660)
@pytest.mark.parametrize("world,hosts", [(2, None), (3, None), (4, None), (4, "aabb"), (4, "abab")])
def test_lossy_reductions_match_numpy_reference_on_every_rank(world, hosts):
    rank_env = (lambda r: {"ZIPCCL_HOST_ID": hosts[r]}) if hosts else None
    outs = _results(launch(WORKER, world, rank_env=rank_env, timeout=600))
    for o in outs:
        assert o["checked"] == 12
        assert o["hier"] == (hosts is not None)
        assert o["rs_calls"] == {"int4": 24, "int8": 24}, "3 dtypes x 2 ops x (tensor, list, 2 coalesced)"
        assert o["ar_calls"] == {"int4": 6, "int8": 6}
    assert all(o["hash"] == outs[0]["hash"] for o in outs), "all_reduce: bitwise identical on every rank"
