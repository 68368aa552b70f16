"""Starts one process per rank inside its host's namespace and collects its
output.

Why not torchrun: torchrun starts every rank in its own network namespace
only if we wrap it, and its agent adds a process per rank, which a 2-core
machine feels. Here each rank is ``[ip netns exec NS] taskset -c CPU python3
-m MODULE ...`` with the torch.distributed environment set (LOCAL_RANK,
GROUP_RANK and the rest as torchrun sets them, from the network's hosts),
pinned to CPUs, with GOMAXPROCS and the torch thread count matched to the
CPUs it got, so four ranks on two cores time-share fairly instead of each
running eight threads.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .topology import Network

LineHandler = Callable[[int, str], None]


def cpu_plan(world_size: int, cpus: Sequence[int] | None = None) -> list[list[int]]:
    """Which CPUs each rank is pinned to: disjoint equal shares when there are
    enough CPUs, else one CPU each, round robin."""
    cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if len(cpus) >= world_size:
        share = len(cpus) // world_size
        return [cpus[r * share:(r + 1) * share] for r in range(world_size)]
    return [[cpus[r % len(cpus)]] for r in range(world_size)]


@dataclass
class RankResult:
    rank: int
    returncode: int
    tail: list[str] = field(default_factory=list)  # last lines of output


class RanksFailed(RuntimeError):
    """A rank exited non-zero or the run timed out."""

    def __init__(self, message: str, results: list[RankResult]):
        super().__init__(message)
        self.results = results


def _pump(rank: int, stream, out: "queue.Queue[tuple[int, str | None]]") -> None:
    for line in iter(stream.readline, ""):
        out.put((rank, line.rstrip("\n")))
    out.put((rank, None))


def launch_ranks(
    net: Network,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    on_line: LineHandler | None = None,
    timeout_s: float = 1800.0,
    master_port: int = 29500,
    tail_lines: int = 40,
    pin: bool = True,
    stall_s: float | None = None,
) -> list[RankResult]:
    """Runs ``python3 <argv>`` as every rank of ``net`` and waits for all.

    Each output line (stdout and stderr merged) goes to ``on_line(rank,
    line)``. When one rank fails, the others get 20 s to fail by themselves
    (their backends notice the lost peer) before they are killed, so their
    own error messages reach the caller. Raises RanksFailed if any rank
    exits non-zero, the run passes ``timeout_s``, or, with ``stall_s``, no
    rank prints a line for that long (a run whose length depends on the
    machine, like training, is then bounded by its progress rather than
    by a total that a slow CPU can exceed). ``pin=False`` leaves
    CPU placement, GOMAXPROCS and OMP_NUM_THREADS to their defaults (to
    check that pinning does not favour one backend).
    """
    plan = cpu_plan(net.world_size)
    taskset = shutil.which("taskset")
    lines: "queue.Queue[tuple[int, str | None]]" = queue.Queue()
    procs: list[subprocess.Popen[str]] = []
    tails: list[list[str]] = [[] for _ in range(net.world_size)]
    if net.mode == "loopback" and master_port == 29500:
        master_port = _free_port()
    try:
        for rank in range(net.world_size):
            cpus = plan[rank]
            rank_env = dict(os.environ)
            rank_env.update(env or {})
            rank_env.update(net.rank_env(rank))
            rank_env.update(
                RANK=str(rank),
                WORLD_SIZE=str(net.world_size),
                MASTER_PORT=str(master_port),
                PYTHONUNBUFFERED="1",
            )
            if pin:
                rank_env.update(GOMAXPROCS=str(len(cpus)), OMP_NUM_THREADS=str(len(cpus)))
            cmd = list(net.command_prefix(rank))
            if taskset and pin:
                cmd += [taskset, "-c", ",".join(map(str, cpus))]
            cmd += [sys.executable, *argv]
            proc = subprocess.Popen(
                cmd, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True,
            )
            procs.append(proc)
            threading.Thread(target=_pump, args=(rank, proc.stdout, lines), daemon=True).start()
        return _wait(procs, lines, tails, on_line, timeout_s, tail_lines, stall_s)
    finally:
        for proc in procs:
            _kill(proc)


def _wait(procs, lines, tails, on_line, timeout_s, tail_lines, stall_s) -> list[RankResult]:
    deadline = time.monotonic() + timeout_s
    open_streams = len(procs)
    failed_at: float | None = None
    last_line = time.monotonic()
    while open_streams:
        now = time.monotonic()
        if now > deadline:
            raise RanksFailed(f"ranks did not finish within {timeout_s:.0f} s", _results(procs, tails))
        if stall_s is not None and failed_at is None and now - last_line > stall_s:
            raise RanksFailed(f"no rank printed a line for {stall_s:.0f} s (stalled)", _results(procs, tails))
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if failed_at is not None and now - failed_at > 20:
            break  # the survivors are stuck: stop waiting, kill them below
        try:
            rank, line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            open_streams -= 1
            continue
        last_line = time.monotonic()
        tails[rank].append(line)
        del tails[rank][:-tail_lines]
        if on_line:
            on_line(rank, line)
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()) if failed_at is None else 1.0)
        except subprocess.TimeoutExpired:
            _kill(proc)
    results = _results(procs, tails)
    bad = [r for r in results if r.returncode != 0]
    if bad:
        first = bad[0]
        raise RanksFailed(
            f"rank {first.rank} exited with {first.returncode}; its last lines:\n  "
            + "\n  ".join(first.tail[-15:]),
            results,
        )
    return results


def _results(procs, tails) -> list[RankResult]:
    return [
        RankResult(rank=r, returncode=p.poll() if p.poll() is not None else -9, tail=list(tails[r]))
        for r, p in enumerate(procs)
    ]


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
