"""Across hosts, not just loopback: two network namespaces joined by a veth
pair (10.77.0.1/24 <-> 10.77.0.2/24), rank 0 in one and rank 1 in the
other, MASTER_ADDR the first namespace's address. Collectives must give the
right values, ZIPCCL_SOCKET_IFNAME must pick the veth (its address is what
a rank publishes, and the log says why), and the traffic must cross the
veth (its byte counters grow by at least the data volume, while loopback
carries next to nothing).

Needs root and `ip netns`; skipped otherwise. The namespaces are removed
even when the test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from harness import launch

ADDRS = ["10.77.0.1", "10.77.0.2"]

RANK_SCRIPT = r"""
import datetime, os, sys, time
import torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=60))
rank, ws = dist.get_rank(), dist.get_world_size()
store = dist.PrefixStore("cpu/", dist.distributed_c10d._get_default_store())
print("published", store.get(f"zipccl/addr/{rank}").decode(), flush=True)
n = 4 << 20  # 16 MiB of float32 per tensor
t = torch.arange(n, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(n, dtype=torch.float32) * 3), "all_reduce"
b = torch.full((n,), float(rank))
dist.broadcast(b, src=1)
assert torch.equal(b, torch.ones(n)), "broadcast"
out = torch.empty(2 * 1000)
dist.all_gather_into_tensor(out, torch.full((1000,), float(rank)))
assert out[:1000].eq(0).all() and out[1000:].eq(1).all(), "all_gather"
x = torch.arange(10.0)
if rank == 0:
    dist.send(x, dst=1, tag=3)
else:
    y = torch.zeros(10)
    dist.recv(y, src=0, tag=3)
    assert torch.equal(x, y), "send/recv"
# An uneven all_to_all, as MoE routing makes them: rank 0 sends nothing,
# rank 1 sends 1 Mi floats to each rank. On a group that codes, both ranks
# must still run the same protocol (each knows only its own splits).
g = dist.new_group(pg_options=zipccl.Options(compression="always"))
m = 1 << 20
torch.manual_seed(7)
data = torch.randn(2 * m)
inp = torch.empty(0) if rank == 0 else data
got = torch.empty(m)
dist.all_to_all_single(got, inp, output_split_sizes=[0, m], input_split_sizes=[0, 0] if rank == 0 else [m, m], group=g)
assert torch.equal(got, data[m * rank:m * (rank + 1)]), "uneven all_to_all"
assert zipccl.stats(g)["ops"]["all_to_all"]["choices"] != {"raw": 1}, zipccl.stats(g)
# Then the splits change from call to call (s[r]: what rank r sends to each
# rank). Each call is decided on the size the last one agreed, so both ranks
# still take the same decision, whatever their own sizes now.
def payload(k, r, n):
    return torch.randn(2 * n, generator=torch.Generator().manual_seed(100 * k + r))
for k, s in enumerate([(m // 2, 0), (3, m), (0, 0), (m, 5)]):
    got = torch.empty(s[0] + s[1])
    dist.all_to_all_single(got, payload(k, rank, s[rank]), output_split_sizes=list(s),
                           input_split_sizes=[s[rank]] * 2, group=g)
    want = torch.cat([payload(k, r, s[r])[s[r] * rank:s[r] * (rank + 1)] for r in range(2)])
    assert torch.equal(got, want), f"uneven all_to_all, call {k}"
dist.barrier()
stats = zipccl.stats()
print("wire", sum(v["wire_bytes"] for v in stats["ops"].values()), flush=True)
dist.destroy_process_group()
print("ok", flush=True)
"""


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"zctest-probe-{uuid.uuid4().hex[:6]}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add fails here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def _counter(ns, dev, what):
    return int(subprocess.run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/statistics/{what}"], capture_output=True, text=True, check=True).stdout)


@pytest.fixture
def veth_pair():
    why = _unavailable()
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    ns = [f"zctest-{tag}-0", f"zctest-{tag}-1"]
    dev = [f"zt{tag}a", f"zt{tag}b"]
    try:
        for n in ns:
            _ip("netns", "add", n)
        _ip("link", "add", dev[0], "type", "veth", "peer", "name", dev[1])
        for i in range(2):
            _ip("link", "set", dev[i], "netns", ns[i])
            _ip("-n", ns[i], "addr", "add", f"{ADDRS[i]}/24", "dev", dev[i])
            _ip("-n", ns[i], "link", "set", dev[i], "up")
            _ip("-n", ns[i], "link", "set", "lo", "up")
        yield ns, dev
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)  # takes the veth with it


def test_two_namespaces_over_veth(veth_pair):
    ns, dev = veth_pair
    before = {i: (_counter(ns[i], dev[i], "tx_bytes"), _counter(ns[i], "lo", "tx_bytes")) for i in range(2)}
    # Rank 0 lists a missing interface first: the first one that exists wins.
    ifname = {0: f"zcnope0,{dev[0]}", 1: dev[1]}
    res = launch(
        RANK_SCRIPT,
        2,
        env={"ZIPCCL_DEBUG": "INFO"},
        rank_env=lambda r: {"ZIPCCL_SOCKET_IFNAME": ifname[r]},
        prefix=lambda r: ["ip", "netns", "exec", ns[r]],
        master_addr=ADDRS[0],
        timeout=180,
    )
    for r in res:
        assert r.returncode == 0 and "ok" in r.stdout, f"rank {r.rank}: rc={r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    for r in res:
        published = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("published")]
        assert published and published[0].startswith(ADDRS[r.rank] + ":"), f"rank {r.rank} published {published}"
        assert f"(interface chosen by ZIPCCL_SOCKET_IFNAME={dev[r.rank]})" in r.stderr, r.stderr[-2000:]
    wire = [int(line.split()[1]) for r in res for line in r.stdout.splitlines() if line.startswith("wire")]
    after = {i: (_counter(ns[i], dev[i], "tx_bytes"), _counter(ns[i], "lo", "tx_bytes")) for i in range(2)}
    for i in range(2):
        veth = after[i][0] - before[i][0]
        lo = after[i][1] - before[i][1]
        # Rank i sent at least its engine payload over the veth, ...
        assert veth >= wire[i] >= 8 << 20, f"rank {i}: veth tx {veth} bytes, engine payload {wire[i]}"
        # ... and not over loopback.
        assert lo < 1 << 20, f"rank {i}: {lo} bytes went over loopback"


def test_socket_ifname_without_a_usable_interface(veth_pair):
    ns, dev = veth_pair
    res = launch(
        RANK_SCRIPT,
        2,
        rank_env=lambda r: {"ZIPCCL_SOCKET_IFNAME": "zcnope0,zcnope1"},
        prefix=lambda r: ["ip", "netns", "exec", ns[r]],
        master_addr=ADDRS[0],
        timeout=120,
    )
    for r in res:
        assert r.returncode != 0
        assert "ZIPCCL_SOCKET_IFNAME" in r.stderr and "zcnope0" in r.stderr, r.stderr[-2000:]


LOCAL_SCRIPT = r"""
import datetime
import torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
n = 4 << 20  # 16 MiB of float32
for k in range(4):
    b = torch.full((n,), float(rank + k))
    dist.broadcast(b, src=k % 2)
    assert torch.equal(b, torch.full((n,), float(k % 2 + k))), f"broadcast {k}"
t = torch.arange(n, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(n, dtype=torch.float32) * 3), "all_reduce"
dist.barrier()
print("wire", sum(v["wire_bytes"] for v in zipccl.stats()["ops"].values()), flush=True)
dist.destroy_process_group()
print("ok", flush=True)
"""


@pytest.fixture
def one_namespace():
    why = _unavailable()
    if why:
        pytest.skip(why)
    ns = f"zctest-{uuid.uuid4().hex[:6]}-lo"
    try:
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.parametrize("cma", ["1", "0"])
def test_ranks_of_one_namespace_read_each_others_memory(one_namespace, cma):
    """Two ranks in one network namespace move large messages with
    process_vm_readv: loopback carries the headers and acknowledgements, a
    small fraction of the payload. With ZIPCCL_CMA=0 it carries all of it.
    (test_two_namespaces_over_veth proves the other side: ranks of two
    namespaces send every byte over their link.)"""
    ns = one_namespace
    before = _counter(ns, "lo", "tx_bytes")
    res = launch(LOCAL_SCRIPT, 2, env={"ZIPCCL_CMA": cma}, prefix=lambda r: ["ip", "netns", "exec", ns], timeout=180)
    for r in res:
        assert r.returncode == 0 and "ok" in r.stdout, f"rank {r.rank}: rc={r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    wire = sum(int(line.split()[1]) for r in res for line in r.stdout.splitlines() if line.startswith("wire"))
    lo = _counter(ns, "lo", "tx_bytes") - before
    assert wire >= 64 << 20, wire
    if cma == "1":
        assert lo < wire // 16, f"loopback carried {lo} bytes of {wire}"
    else:
        assert lo >= wire, f"loopback carried {lo} bytes of {wire}"
