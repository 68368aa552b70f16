"""The pre-shared key and encryption, end to end: fresh rank processes with
the variables a user sets (ZIPCCL_AUTH_KEY, ZIPCCL_AUTH_KEY_FILE,
ZIPCCL_ENCRYPT, zipccl.Options(encrypt=True)), and the attack the key stops
run as an attacker would: a plain TCPStore client reads the group secret
and answers the handshake with it."""

from __future__ import annotations

import os

import pytest
from harness import launch, tmpfile

KEY = "k3y-that-must-never-be-printed"

# Rank 1's process also plays the stranger: it uses nothing of the job but
# a TCPStore client of MASTER_ADDR:MASTER_PORT, as any process that can
# reach that port could.
ATTACK = r"""
import datetime, hashlib, hmac, os, socket, struct, sys
import torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
t = torch.ones(8)
dist.all_reduce(t)
assert t[0].item() == 2
if rank == 1:
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=10))
    prefix = "default_pg/0//cpu//"
    secret = store.get(prefix + "zipccl/secret")
    host, port = store.get(prefix + "zipccl/addr/0").decode().rsplit(":", 1)
    name = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).group_name

    def recv_exact(s, n):
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def attack(flags):
        # backend/transport/handshake.go, protocol version 5: claim to be
        # rank 1 dialing rank 0, and prove it with the Store's secret
        s = socket.create_connection((host, int(port)), timeout=5)
        nonce = os.urandom(16)
        s.sendall(struct.pack("<IHHII", 0x3148435A, 5, len(name), 1, 0) + nonce + bytes([flags, 0, 0, 0]) + name.encode())
        rep = recv_exact(s, 8)
        if rep is None:
            return "closed"
        if rep[4] != 0:
            return f"status {rep[4]}"
        rest = recv_exact(s, 48)
        if rest is None:
            return "closed"
        nonce_s = rest[:16]
        transcript = name.encode() + struct.pack("<II", 1, 0) + nonce + nonce_s
        s.sendall(hmac.new(secret, b"zipccl-client" + transcript, hashlib.sha256).digest())
        s.settimeout(5)
        try:
            ack = s.recv(1)
        except (ConnectionResetError, socket.timeout):
            ack = b""
        s.close()
        return "admitted" if ack == b"K" else "refused"

    print("attack without key flag:", attack(0), flush=True)
    print("attack claiming a key:", attack(1), flush=True)
    dist.distributed_c10d._get_default_store().set("attack done", "1")
else:
    # the stranger may have displaced rank 1's pair: end without zipccl,
    # rank 0 (the Store's server) last
    dist.distributed_c10d._get_default_store().get("attack done")
print("job ok", flush=True)
os._exit(0)
"""


def test_store_reader_is_admitted_without_key_refused_with_one():
    plain = launch(ATTACK, 2, env={"ZIPCCL_DEBUG": "WARN"}, timeout=120)
    for r in plain:
        assert r.returncode == 0 and "job ok" in r.stdout, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
    assert "attack without key flag: admitted" in plain[1].stdout, plain[1].stdout

    keyed = launch(ATTACK, 2, env={"ZIPCCL_DEBUG": "WARN", "ZIPCCL_AUTH_KEY": KEY}, timeout=120)
    for r in keyed:
        assert r.returncode == 0 and "job ok" in r.stdout, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
    out = keyed[1].stdout
    assert "attack without key flag: status 3" in out, out  # told it has no key, and no MAC
    assert "attack claiming a key: refused" in out, out  # the Store's secret is not the pair key
    assert keyed[0].stderr.count("refused a connection") >= 2, keyed[0].stderr[-3000:]
    for r in keyed:
        assert KEY not in r.stdout + r.stderr


MISMATCH = r"""
import datetime, time, torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=8))
t0 = time.monotonic()
try:
    t = torch.ones(4)
    dist.all_reduce(t)
    print("no error", flush=True)
except RuntimeError as e:
    print(f"RuntimeError after {time.monotonic() - t0:.1f}s: {e}", flush=True)
"""


@pytest.mark.parametrize("via", ["env", "file"])
def test_key_mismatch_fails_both_sides(via):
    path = tmpfile()
    with open(path, "w") as f:
        f.write(KEY + "\n")
    keyed = {"ZIPCCL_AUTH_KEY": KEY} if via == "env" else {"ZIPCCL_AUTH_KEY_FILE": path}
    try:
        res = launch(MISMATCH, 2, env={"ZIPCCL_DEBUG": "INFO"}, rank_env=lambda r: keyed if r == 0 else {}, timeout=60)
    finally:
        os.unlink(path)
    for r in res:
        assert r.returncode == 0 and "RuntimeError after" in r.stdout, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
        secs = float(r.stdout.split("RuntimeError after ")[1].split("s:")[0])
        assert secs < 8 + 5, f"rank {r.rank} took {secs}s"
        assert KEY not in r.stdout + r.stderr, f"rank {r.rank} printed the key"
    assert "peer has no auth key" in res[0].stdout, res[0].stdout
    assert "this rank has no auth key" in res[1].stdout, res[1].stdout
    assert "pre-shared key" in res[0].stderr, "the creation log says a key is in use"


ENCRYPTED = r"""
import datetime, torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=60))
rank, ws = dist.get_rank(), dist.get_world_size()
sealed = dist.new_group(backend="zipccl", pg_options=zipccl.Options(encrypt=True))

def ops(group):
    out = []
    for dt in (torch.float32, torch.bfloat16):
        x = (torch.randn(300_000, generator=torch.Generator().manual_seed(rank)) * 0.02).to(dt)
        dist.all_reduce(x, group=group)
        out.append(x)
        y = torch.randn(70_001, generator=torch.Generator().manual_seed(10 + rank)).to(dt)
        parts = [torch.empty_like(y) for _ in range(ws)]
        dist.all_gather(parts, y, group=group)
        out += parts
        b = torch.randn(50_000, generator=torch.Generator().manual_seed(20 + rank)).to(dt)
        dist.broadcast(b, 1, group=group)
        out.append(b)
        a = torch.randn(ws * 4096, generator=torch.Generator().manual_seed(30 + rank)).to(dt)
        o = torch.empty_like(a)
        dist.all_to_all_single(o, a, group=group)
        out.append(o)
    return out

plain, enc = ops(None), ops(sealed)
same = all(torch.equal(p.view(torch.int16 if p.dtype == torch.bfloat16 else torch.int32),
                       e.view(torch.int16 if e.dtype == torch.bfloat16 else torch.int32)) for p, e in zip(plain, enc))
print("bit identical:", same, flush=True)
st, st_plain = zipccl.stats(sealed), zipccl.stats()
print("stats:", st["auth_key"], st["encrypted"], st_plain["auth_key"], st_plain["encrypted"], flush=True)
dist.destroy_process_group()
"""


def test_encrypted_collectives_bit_identical_with_key_file():
    path = tmpfile()
    with open(path, "w") as f:
        f.write(KEY + "\n")
    try:
        res = launch(ENCRYPTED, 3, env={"ZIPCCL_AUTH_KEY_FILE": path, "ZIPCCL_DEBUG": "INFO"}, timeout=180)
    finally:
        os.unlink(path)
    for r in res:
        assert r.returncode == 0 and "bit identical: True" in r.stdout, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
        assert "stats: True True True False" in r.stdout, r.stdout
        assert "encrypted (AES-256-GCM)" in r.stderr, "the encrypted group's creation log says so"
        assert KEY not in r.stdout + r.stderr


def test_ranks_disagreeing_on_encryption_fail_clearly():
    res = launch(MISMATCH, 2, rank_env=lambda r: {"ZIPCCL_ENCRYPT": "1"} if r == 1 else {}, timeout=60)
    for r in res:
        assert r.returncode == 0 and "RuntimeError after" in r.stdout, f"rank {r.rank}: {r.stdout}\n{r.stderr[-3000:]}"
    both = res[0].stdout + res[1].stdout
    assert "encrypt" in both, both
