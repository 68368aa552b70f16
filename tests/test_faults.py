"""Faults: each must end in a RuntimeError on every affected rank, with a
message naming what and where, in bounded time, never a hang.

* ranks that disagree (shapes, dtypes, reduce ops, op kinds, roots, splits,
  p2p sizes) -> an error on every rank; the group keeps working;
* a peer killed (SIGKILL, os._exit) mid-collective -> pending and later
  ops fail on every survivor, naming the lost rank, well before the
  timeout;
* a stranger connecting to a rank's listening port is refused (WARN) and
  the job carries on;
* SIGINT raises KeyboardInterrupt in a rank looping over collectives;
* fork: DataLoader workers (fork context) keep working; a forked child that
  calls zipccl gets the "forked child" error;
* tensors the GPU path cannot take are rejected before anything is sent,
  with a clear message, and the group keeps working: CUDA tensors in a
  process that sees no GPU, CUDA tensors without device memory, CPU and
  CUDA tensors mixed in one call (a wrapper-subclass tensor on the "cuda"
  device stands in for a CUDA tensor on a GPU-less machine; real CUDA
  tensors are mixed in too where a GPU exists). The GPU path itself:
  tests/test_gpu.py.

Unsupported dtypes/ops raising before any byte is sent: test_validation.py.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.distributed as dist

from harness import RANK_ENV, TESTS_DIR, free_port, launch, spawn
from refs import no_failures

# ---------------------------------------------------------------------------
# Mismatches (on the shared pools: the group must survive them)


def _mismatch_cases(ws):
    """(name, words every rank's error must contain, fn(rank))."""
    last = ws - 1
    return [
        ("shape", ["all_reduce", "disagree", "elements"], lambda r: dist.all_reduce(torch.ones(4 + (r == last)))),
        ("dtype", ["all_reduce", "disagree", "float64"], lambda r: dist.all_reduce(torch.ones(4, dtype=torch.float64 if r == last else torch.float32))),
        ("reduce op", ["all_reduce", "disagree", "MAX"], lambda r: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.MAX if r == last else dist.ReduceOp.SUM)),
        ("op kind", ["disagree", "broadcast", "all_reduce"], lambda r: dist.broadcast(torch.ones(4), src=0) if r == last else dist.all_reduce(torch.ones(4))),
        ("root", ["broadcast", "disagree", "root"], lambda r: dist.broadcast(torch.ones(4), src=last if r == last else 0)),
        ("async shape", ["all_reduce", "disagree"], lambda r: dist.all_reduce(torch.ones(4 + (r == last)), async_op=True).get_future().wait()),
        ("all_gather sizes", ["all_gather", "disagree"], lambda r: dist.all_gather([torch.zeros(2 + (i == 0 and r == last)) for i in range(ws)], torch.ones(2 + (r == 0 and r == last)))),
        ("reduce_scatter sizes", ["reduce_scatter", "disagree"], lambda r: dist.reduce_scatter_tensor(torch.zeros(2 + (r == last)), torch.ones(ws * (2 + (r == last))))),
        ("barrier vs all_reduce", ["disagree", "barrier"], lambda r: dist.barrier() if r == last else dist.all_reduce(torch.ones(1))),
    ]


def task_mismatch(ctx):
    ws, me = ctx.world_size, ctx.rank
    problems, messages = [], {}
    for k, (what, needles, fn) in enumerate(_mismatch_cases(ws)):
        t0 = time.monotonic()
        try:
            fn(me)
            problems.append(f"{what}: no error")
        except RuntimeError as e:
            msg = str(e)
            messages[what] = msg
            missing = [n for n in needles if n.lower() not in msg.lower()]
            if missing:
                problems.append(f"{what}: message lacks {missing}: {msg[:400]}")
        took = time.monotonic() - t0
        if took > 10:
            problems.append(f"{what}: took {took:.1f}s (a timeout, not a detected mismatch?)")
        # The group is usable afterwards.
        t = torch.full((3,), float(me + k))
        try:
            dist.all_reduce(t)
            if t.tolist() != [float(sum(r + k for r in range(ws)))] * 3:
                problems.append(f"after {what}: all_reduce gives {t.tolist()}")
        except RuntimeError as e:
            problems.append(f"after {what}: the group is broken: {str(e)[:300]}")
    return problems, messages


@pytest.mark.parametrize("ws", [2, 3])
def test_mismatch_fails_every_rank_and_group_survives(pools, ws):
    out = pools.get(ws).run(task_mismatch)
    no_failures([p for p, _ in out])


def task_all_to_all_split_mismatch(ctx):
    """Rank 0 expects 1 row from the last rank, which sends it 3."""
    ws, me = ctx.world_size, ctx.rank
    last = ws - 1
    ins, outs = [1] * ws, [1] * ws
    if me == last:
        ins[0] = 3
    out = torch.zeros(sum(outs), 2)
    try:
        dist.all_to_all_single(out, torch.ones(sum(ins), 2), output_split_sizes=outs, input_split_sizes=ins)
        msg = None
    except RuntimeError as e:
        msg = str(e)
    t = torch.ones(2)
    dist.all_reduce(t)
    return msg, t.tolist()


@pytest.mark.parametrize("ws", [2, 3])
def test_all_to_all_split_mismatch(pools, ws):
    out = pools.get(ws).run(task_all_to_all_split_mismatch)
    for rank, (msg, t) in enumerate(out):
        assert t == [float(ws)] * 2, "the group must survive"
        # Every rank fails (the sender of the wrong-sized block too), with
        # the receiver's message naming both sizes.
        assert msg and "all_to_all" in msg and f"rank {ws - 1} sent 24 bytes where rank 0 expected 8 bytes" in msg, (rank, msg)


def task_p2p_size_mismatch(ctx):
    """A message longer than the posted receive buffer fails the receive,
    naming both sizes; the pair keeps working."""
    me = ctx.rank
    problems = []
    if me == 0:
        dist.send(torch.ones(5), dst=1, tag=77)
    elif me == 1:
        try:
            dist.recv(torch.zeros(4), src=0, tag=77)
            problems.append("a 5-element message was received into a 4-element buffer")
        except RuntimeError as e:
            msg = str(e)
            if "recv" not in msg or "rank 0" not in msg:
                problems.append(f"recv error does not name the op and the sender: {msg}")
    if me in (0, 1):
        t = torch.full((2,), float(me))
        if me == 0:
            dist.send(t, dst=1, tag=78)
        else:
            dist.recv(t, src=0, tag=78)
            if t.tolist() != [0.0, 0.0]:
                problems.append(f"p2p after the mismatch gave {t.tolist()}")
    t = torch.ones(1)
    dist.all_reduce(t)
    return problems


@pytest.mark.parametrize("ws", [2])
def test_p2p_size_mismatch(pools, ws):
    no_failures(pools.get(ws).run(task_p2p_size_mismatch))


# ---------------------------------------------------------------------------
# A peer dies mid-collective (fresh processes)

GROUP_TIMEOUT = 30.0


def killed_peer_rank(rank, ws, victim, how):
    import zipccl  # noqa: F401

    dist.init_process_group("zipccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=GROUP_TIMEOUT))
    dist.all_reduce(torch.ones(4))  # every pair connected
    big = torch.ones(16 << 20)  # 64 MiB: the ring, many segments, tens of ms
    dist.barrier()
    work = dist.all_reduce(big, async_op=True)
    if rank == victim:
        # Part-way through: it has sent far less than its share by then, so
        # no survivor can have finished.
        time.sleep(0.002)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    out = {}
    t0 = time.monotonic()
    try:
        work.wait()
        out["pending"] = None
    except RuntimeError as e:
        out["pending"] = str(e)
    out["pending_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    for name, fn in [
        ("all_reduce", lambda: dist.all_reduce(torch.ones(2))),
        ("broadcast", lambda: dist.broadcast(torch.ones(2), src=0)),
        ("send", lambda: dist.send(torch.ones(2), dst=victim)),
        ("recv", lambda: dist.recv(torch.ones(2), src=victim)),
    ]:
        try:
            fn()
            out[name] = None
        except RuntimeError as e:
            out[name] = str(e)
    out["later_s"] = time.monotonic() - t0
    return out


@pytest.mark.parametrize("how", ["sigkill", "os_exit"])
def test_peer_killed_mid_collective(how):
    ws, victim = 3, 2
    t0 = time.monotonic()
    out = spawn(ws, killed_peer_rank, victim, how, timeout=120)
    assert out[victim] is None
    for rank in range(ws):
        if rank == victim:
            continue
        res = out[rank]
        for key in ("pending", "all_reduce", "broadcast", "send", "recv"):
            msg = res[key]
            assert msg is not None, f"rank {rank}: {key} succeeded after rank {victim} died"
            assert f"rank {victim}" in msg, f"rank {rank}: {key} error does not name rank {victim}: {msg}"
        assert "lost" in res["pending"] or "closed" in res["pending"] or "reset" in res["pending"], res["pending"]
        assert res["pending_s"] < GROUP_TIMEOUT / 2, f"rank {rank}: the pending op took {res['pending_s']:.1f}s to fail"
        assert res["later_s"] < 5, f"rank {rank}: later ops took {res['later_s']:.1f}s to fail"
    assert time.monotonic() - t0 < 90


# ---------------------------------------------------------------------------
# A stranger on the listening port (fresh processes, stderr captured)

STRANGER = r"""
import datetime, os, socket, struct, sys, time
import torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
rank, ws = dist.get_rank(), dist.get_world_size()

def ar(k, group=None):
    t = torch.full((100,), float(rank + k))
    dist.all_reduce(t, group=group)
    assert t[0].item() == sum(r + k for r in range(ws)), (k, t[0].item())

ar(0)
name = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).group_name
store = dist.PrefixStore("cpu/", dist.distributed_c10d._get_default_store())
host, port = store.get("zipccl/addr/0").decode().rsplit(":", 1)
port = int(port)
held = []
if rank == 1:
    def hello(src, dst):  # 5: protocolVersion in backend/transport/handshake.go; flags 0
        return struct.pack("<IHHII", 0x3148435A, 5, len(name), src, dst) + os.urandom(16) + bytes(4) + name.encode()

    def read_all(s):
        data = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return data, "closed"
                data += chunk
        except socket.timeout:
            return data, "open"
        except ConnectionResetError:  # closed with our bytes unread
            return data, "closed"

    # 1. Garbage.
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(os.urandom(64))
    print("garbage:", read_all(s)[1], flush=True)
    s.close()
    # 2. A well-formed hello for the real group, then a wrong MAC.
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(hello(1, 0))
    reply = b""
    while len(reply) < 8 + 16 + 32:
        chunk = s.recv(8 + 16 + 32 - len(reply))
        if not chunk:
            break
        reply += chunk
    print("reply status:", reply[4] if len(reply) > 4 else None, flush=True)
    s.sendall(os.urandom(32))
    data, state = read_all(s)
    print("bad mac:", state, "accepted" if b"K" in data[:1] else "refused", flush=True)
    s.close()
    # 3. A hello claiming a rank that cannot dial rank 0.
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(hello(0, 0))
    print("bad pair:", read_all(s)[1], flush=True)
    s.close()
    # 4. A silent connection, held open while the job goes on.
    held.append(socket.create_connection((host, port), timeout=5))
for k in range(1, 6):
    ar(k)
g = dist.new_group()  # new pairs are accepted while the stranger waits
ar(7, group=g)
ar(8, group=g)
dist.barrier()
print("job ok", flush=True)
dist.destroy_process_group()
"""


def test_stranger_is_refused_and_job_continues():
    res = launch(STRANGER, 2, env={"ZIPCCL_DEBUG": "WARN"}, timeout=120)
    for r in res:
        assert r.returncode == 0 and "job ok" in r.stdout, f"rank {r.rank} rc={r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    out1 = res[1].stdout
    assert "garbage: closed" in out1, out1
    assert "reply status: 0" in out1, out1  # the listener did answer the well-formed hello...
    assert "bad mac: closed refused" in out1, out1  # ...and refused the wrong MAC
    assert "bad pair: closed" in out1, out1
    warns = [line for line in res[0].stderr.splitlines() if " zipccl WARN " in line and "refused a connection" in line]
    assert len(warns) >= 3, "rank 0 must log each refusal at WARN:\n" + res[0].stderr[-3000:]
    assert any("claiming to be rank 1" in w for w in warns), warns
    assert any("invalid rank for this pair" in w for w in warns), warns
    assert all(re.search(r"\[0\]", w) for w in warns), warns


# ---------------------------------------------------------------------------
# SIGINT

SIGINT_LOOP = r"""
import datetime, signal, sys, time
# Python's own handler, as a foreground launch gets it: a job started in the
# background (`cmd &`) inherits SIGINT ignored, and the test would hang.
signal.signal(signal.SIGINT, signal.default_int_handler)
import torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
i = 0
try:
    while True:
        t = torch.ones(1000)
        dist.all_reduce(t)
        i += 1
        if i == 200:
            print("looping", flush=True)
except KeyboardInterrupt:
    print(f"KeyboardInterrupt after {i} ops", flush=True)
    sys.exit(0)
except RuntimeError as e:
    print(f"RuntimeError: {e}", flush=True)
    sys.exit(0)
"""


def test_sigint_raises_keyboard_interrupt():
    port = free_port()
    procs = []
    for r in range(2):
        env = dict(os.environ, **RANK_ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE="2")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(SIGINT_LOOP)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    try:
        line = procs[0].stdout.readline()  # blocks until rank 0 is looping
        assert line.strip() == "looping", line + procs[0].stderr.read()
        os.kill(procs[0].pid, signal.SIGINT)
        t0 = time.monotonic()
        out0, err0 = procs[0].communicate(timeout=20)
        took = time.monotonic() - t0
        out1, err1 = procs[1].communicate(timeout=40)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode == 0, f"rank 0 died with {procs[0].returncode} (a signal handler?):\n{err0[-2000:]}"
    assert "KeyboardInterrupt after" in out0, out0 + err0[-2000:]
    assert took < 10, f"KeyboardInterrupt took {took:.1f}s"
    # The peer is told, not left hanging.
    assert procs[1].returncode == 0 and "RuntimeError" in out1 and "rank 0" in out1, out1 + err1[-2000:]


# ---------------------------------------------------------------------------
# fork


class _Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.full((3,), float(i))


class _UsesZipccl(torch.utils.data.Dataset):
    """Each item is what a call into zipccl did in the (forked) worker."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        import zipccl

        calls = [
            lambda: dist.all_reduce(torch.ones(1)),
            lambda: dist.broadcast(torch.ones(1), src=0),
            zipccl.info,
            lambda: zipccl.stats(),
        ]
        t0 = time.monotonic()
        try:
            calls[i]()
            return f"call {i}: no error"
        except RuntimeError as e:
            return f"call {i} ({time.monotonic() - t0:.2f}s): {e}"


def fork_rank(rank, ws):
    import zipccl  # noqa: F401

    dist.init_process_group("zipccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=30))
    problems = []
    t = torch.ones(4)
    dist.all_reduce(t)
    loader = torch.utils.data.DataLoader(_Numbers(), batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=60)
    for epoch in range(2):
        total = 0.0
        for batch in loader:
            total += batch.sum().item()
            x = batch.clone()
            dist.all_reduce(x)  # collectives between batches
            if not torch.equal(x, batch * ws):
                problems.append(f"all_reduce between batches: {x.tolist()}")
        if total != 3 * sum(range(16)):
            problems.append(f"epoch {epoch}: sum {total}")
    loader = torch.utils.data.DataLoader(_UsesZipccl(), batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=60)
    for msg in loader:
        if "forked" not in msg or "'spawn'" not in msg:
            problems.append(f"a forked worker calling zipccl: {msg}")
    t = torch.ones(4)
    dist.all_reduce(t)
    if t.tolist() != [float(ws)] * 4:
        problems.append("the parent's group broke after fork workers")
    dist.destroy_process_group()
    return problems


def test_fork_dataloader_workers_and_forked_child():
    no_failures(spawn(2, fork_rank, timeout=120))


# ---------------------------------------------------------------------------
# CUDA tensors


class FakeCuda(torch.Tensor):
    """A tensor that claims to live on "cuda" without device memory (and
    without a GPU): a wrapper subclass with no storage that forwards every
    op below Python, so the c10d op reaches the backend with a tensor whose
    device is CUDA."""

    @staticmethod
    def __new__(cls, shape, dtype=torch.float32):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device="cuda")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with torch._C._DisableTorchDispatch():
            return func(*args, **(kwargs or {}))


def task_cuda_rejected(ctx):
    ws, me = ctx.world_size, ctx.rank
    problems = []
    gpu = torch.cuda.is_available()
    # A tensor that only claims "cuda" (the message adds that there is no
    # GPU where there is none).
    claim = "without device memory" + ("" if gpu else " (a tensor subclass?)")
    mixed = "mixes CPU and CUDA tensors"
    calls = [
        ("all_reduce", claim, lambda: dist.all_reduce(FakeCuda((4,)))),
        ("all_gather_into_tensor", claim, lambda: dist.all_gather_into_tensor(FakeCuda((4 * ws,)), FakeCuda((4,)))),
        # CPU and CUDA in one call, either way round: checked before the
        # device itself, so the message is the same with or without a GPU.
        ("all_gather_into_tensor", mixed, lambda: dist.all_gather_into_tensor(FakeCuda((4 * ws,)), torch.ones(4))),
        ("all_gather_into_tensor", mixed, lambda: dist.all_gather_into_tensor(torch.zeros(4 * ws), FakeCuda((4,)))),
        ("reduce_scatter_tensor", mixed, lambda: dist.reduce_scatter_tensor(FakeCuda((4,)), torch.ones(4 * ws))),
        ("all_to_all_single", mixed, lambda: dist.all_to_all_single(torch.zeros(4 * ws), FakeCuda((4 * ws,)))),
    ]
    if ws > 1:
        calls.append(("send", claim, lambda: dist.send(FakeCuda((4,)), dst=(me + 1) % ws)))
    if gpu:
        cuda = torch.device("cuda", me % torch.cuda.device_count())
        calls += [
            ("all_gather_into_tensor", mixed,
             lambda: dist.all_gather_into_tensor(torch.zeros(4 * ws, device=cuda), torch.ones(4))),
            # Input and outputs checked separately: the whole call is
            # checked again before anything is planned.
            ("all_gather", mixed, lambda: dist.all_gather([torch.zeros(4) for _ in range(ws)], torch.ones(4, device=cuda))),
        ]
    for op, want, call in calls:
        try:
            call()
            problems.append(f"{op} ({want}): accepted")
        except RuntimeError as e:
            msg = str(e)
            if f"zipccl: {op} " not in msg or want not in msg:
                problems.append(f"{op}: expected 'zipccl: {op} ... {want}', got: {msg[:300]}")
    t = torch.ones(2)
    dist.all_reduce(t)
    if t.tolist() != [float(ws)] * 2:
        problems.append("the group broke after rejecting CUDA tensors")
    return problems


@pytest.mark.parametrize("ws", [2])
def test_cuda_tensors_rejected(pools, ws):
    no_failures(pools.get(ws).run(task_cuda_rejected))
