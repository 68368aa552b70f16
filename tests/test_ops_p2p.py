"""Point-to-point and synchronisation at world sizes 2-4 (1 where it means
something): send/recv with tags (matching by tag, FIFO per tag), isend/irecv
of every dtype into non-contiguous buffers, batch_isend_irecv, recv from any
source (returning the sender), large messages, barrier (that it really
waits), and monitored_barrier."""

from __future__ import annotations

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from refs import DTYPES, check_exact, guard, name, no_failures
from test_ops_data import data, strided_zeros


def task_send_recv_tags(ctx, seed):
    """Every rank sends two messages with different tags to the next rank;
    the receiver takes them in the opposite order; then three messages
    with one tag, which must arrive in order."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    nxt, prv = (me + 1) % ws, (me - 1) % ws

    def msg(src, tag, k=0):
        return data(seed, src, (3, 5), torch.float32, f"t{tag}/{k}")

    works = [dist.isend(msg(me, 7), dst=nxt, tag=7), dist.isend(msg(me, 3), dst=nxt, tag=3)]
    for tag in (3, 7):
        t = torch.zeros(3, 5)
        sender = guard(f, f"recv tag {tag}", lambda: dist.recv(t, src=prv, tag=tag))
        if sender is not None and sender != prv:
            f.append(f"recv tag {tag} returned sender {sender}, expected {prv}")
        check_exact(f, f"recv tag {tag} from {prv}", t, msg(prv, tag))
    for w in works:
        guard(f, "isend wait", w.wait)
    # FIFO within a tag: blocking sends from the lower-numbered side first
    # to avoid a cycle of blocking sends.
    for k in range(3):
        if me % 2 == 0:
            dist.send(msg(me, 5, k), dst=nxt, tag=5)
            t = torch.zeros(3, 5)
            dist.recv(t, src=prv, tag=5)
        else:
            t = torch.zeros(3, 5)
            dist.recv(t, src=prv, tag=5)
            dist.send(msg(me, 5, k), dst=nxt, tag=5)
        check_exact(f, f"same-tag message {k} in order", t, msg(prv, 5, k))
    return f


def task_isend_irecv_dtypes(ctx, seed):
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    nxt, prv = (me + 1) % ws, (me - 1) % ws
    for i, dt in enumerate(DTYPES):
        mine = data(seed + i, me, (4, 6), dt)
        theirs = data(seed + i, prv, (4, 6), dt)
        _, out = strided_zeros((4, 6), dt)
        recv = dist.irecv(out, src=prv, tag=i)
        send = dist.isend(mine.t().contiguous().t(), dst=nxt, tag=i)
        guard(f, f"isend {name(dt)}", send.wait)
        guard(f, f"irecv {name(dt)}", recv.wait)
        if not recv.is_completed():
            f.append(f"irecv {name(dt)}: not completed after wait()")
        check_exact(f, f"isend/irecv {name(dt)}", out, theirs)
    # A large message (4 MiB) both ways around the ring.
    big = data(seed, me, (1 << 20,), torch.float32, "big")
    out = torch.empty(1 << 20)
    works = [dist.irecv(out, src=prv, tag=99), dist.isend(big, dst=nxt, tag=99)]
    for w in works:
        guard(f, "large isend/irecv", w.wait)
    check_exact(f, "large isend/irecv", out, data(seed, prv, (1 << 20,), torch.float32, "big"))
    # Empty message.
    works = [dist.irecv(torch.empty(0), src=prv, tag=98), dist.isend(torch.empty(0), dst=nxt, tag=98)]
    for w in works:
        guard(f, "empty isend/irecv", w.wait)
    return f


def task_batch_isend_irecv(ctx, seed):
    """Both directions around the ring in one batch (what pipelining does),
    waiting only on the last work as older torch pipelining did, then all."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    nxt, prv = (me + 1) % ws, (me - 1) % ws
    for rnd in range(3):
        to_next = data(seed + rnd, me, (8,), torch.bfloat16, "n")
        to_prev = data(seed + rnd, me, (2, 3), torch.int64, "p")
        from_prev = torch.zeros(8, dtype=torch.bfloat16)
        from_next = torch.zeros(2, 3, dtype=torch.int64)
        ops = [
            dist.P2POp(dist.isend, to_next, nxt),
            dist.P2POp(dist.irecv, from_prev, prv),
            dist.P2POp(dist.isend, to_prev, prv, tag=1),
            dist.P2POp(dist.irecv, from_next, nxt, tag=1),
        ]
        works = guard(f, "batch_isend_irecv", lambda: dist.batch_isend_irecv(ops))
        if works is None:
            continue
        if rnd == 0:
            guard(f, "batch_isend_irecv last work", works[-1].wait)  # covers the batch
        for w in works:
            guard(f, "batch_isend_irecv work", w.wait)
        check_exact(f, f"batch_isend_irecv round {rnd} from prev", from_prev, data(seed + rnd, prv, (8,), torch.bfloat16, "n"))
        check_exact(f, f"batch_isend_irecv round {rnd} from next", from_next, data(seed + rnd, nxt, (2, 3), torch.int64, "p"))
    return f


def task_recv_any_source(ctx, seed, rounds):
    """Rank 0 receives from whoever sends first; the payload names the
    sender, which recv() must return."""
    f: list[str] = []
    ws, me = ctx.world_size, ctx.rank
    if me == 0:
        seen = []
        for _ in range(rounds * (ws - 1)):
            t = torch.full((4,), -1, dtype=torch.int32)
            src = guard(f, "recv(src=None)", lambda: dist.recv(t, tag=4))
            if src is None:
                continue
            seen.append(src)
            want_src, k = int(t[0]), int(t[1])
            if src != want_src:
                f.append(f"recv(src=None) returned {src}, but the message came from rank {want_src}")
            check_exact(f, f"message {k} from {src}", t, torch.tensor([want_src, k, want_src * 10, 7], dtype=torch.int32))
        if sorted(seen) != sorted(r for r in range(1, ws) for _ in range(rounds)):
            f.append(f"senders seen {sorted(seen)}")
        # irecv any source too.
        w = dist.irecv(torch.zeros(2), tag=6)
        guard(f, "irecv(src=None)", w.wait)
        src = w._source_rank()
        if src != ws - 1:
            f.append(f"irecv(src=None) source rank {src}, expected {ws - 1}")
    else:
        for k in range(rounds):
            dist.send(torch.tensor([me, k, me * 10, 7], dtype=torch.int32), dst=0, tag=4)
        if me == ws - 1:
            dist.send(torch.ones(2), dst=0, tag=6)
    return f


def task_barrier(ctx, delay):
    """Rank 0 arrives late; nobody may leave the barrier before it arrives."""
    dist.barrier()  # line up
    if ctx.rank == 0:
        time.sleep(delay)
        t0 = time.time()
        dist.barrier()
        return t0
    dist.barrier()
    return time.time()


def task_monitored_barrier(ctx):
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=10))
        out = "ok"
    except RuntimeError as e:
        out = str(e)
    t = torch.ones(2)
    dist.all_reduce(t)
    return out, t.tolist()


# ---------------------------------------------------------------------------


P2P_SIZES = [2, 3, 4]


@pytest.mark.parametrize("ws", P2P_SIZES)
def test_send_recv_tags(pools, ws):
    no_failures(pools.get(ws).run(task_send_recv_tags, 41))


@pytest.mark.parametrize("ws", P2P_SIZES)
def test_isend_irecv_all_dtypes(pools, ws):
    no_failures(pools.get(ws).run(task_isend_irecv_dtypes, 42))


@pytest.mark.parametrize("ws", P2P_SIZES)
def test_batch_isend_irecv(pools, ws):
    no_failures(pools.get(ws).run(task_batch_isend_irecv, 43))


@pytest.mark.parametrize("ws", P2P_SIZES)
def test_recv_any_source(pools, ws):
    no_failures(pools.get(ws).run(task_recv_any_source, 44, 3))


@pytest.mark.parametrize("ws", [1, 2, 4])
def test_barrier_waits_for_everyone(pools, ws):
    delay = 0.5
    out = pools.get(ws).run(task_barrier, delay)
    # Clocks are one machine's: every rank left after rank 0 entered.
    for r in range(1, ws):
        assert out[r] >= out[0] - 0.05, f"rank {r} left the barrier {out[0] - out[r]:.3f}s before rank 0 entered it"


@pytest.mark.parametrize("ws", [2])
def test_monitored_barrier(pools, ws):
    import inspect

    if "only implemented for GLOO" in inspect.getsource(dist.monitored_barrier):
        pytest.skip(f"torch {torch.__version__} runs monitored_barrier on gloo groups only")
    out = pools.get(ws).run(task_monitored_barrier)
    for msg, t in out:
        assert t == [float(ws)] * 2, "the group must keep working after monitored_barrier"
    if out[0][0] != "ok":
        msg = out[0][0]
        assert "monitoredBarrier" in msg or "monitored_barrier" in msg, msg
        pytest.skip(f"monitored_barrier is not supported by zipccl (only gloo implements it); it raises: {msg}")
