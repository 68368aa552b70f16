"""Multi-process test harness: spawned (never forked) ranks that keep one
process group alive across many test functions, so the suite pays torch's
import cost once per world size rather than once per test.

A task is a module-level function ``fn(ctx, *args)`` run on every rank;
``ctx`` carries the rank, the world size and the groups. Results come back as
a list indexed by rank; an exception on any rank fails the call with every
rank's traceback.
"""

from __future__ import annotations

import dataclasses
import datetime
import multiprocessing as mp
import os
import queue
import socket
import tempfile
import traceback
from typing import Any, Callable

_SPAWN = mp.get_context("spawn")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Ctx:
    rank: int
    world_size: int
    group: Any = None  # the zipccl default group (None = WORLD)
    gloo: Any = None  # a gloo group over the same ranks, for references
    scratch: dict = dataclasses.field(default_factory=dict)


class TaskError(AssertionError):
    pass


def _worker(rank: int, world_size: int, port: int, backend: str, env: dict, tasks, results, timeout_s: float) -> None:
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    import torch.distributed as dist

    import zipccl  # noqa: F401  (registers the backend)

    ctx = Ctx(rank=rank, world_size=world_size)
    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
        )
        if backend != "gloo":
            ctx.gloo = dist.new_group(backend="gloo")
        results.put((rank, "ready", None))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        return
    while True:
        item = tasks.get()
        if item is None:
            break
        fn, args = item
        try:
            out = fn(ctx, *args)
            results.put((rank, "ok", out))
        except BaseException:
            results.put((rank, "error", traceback.format_exc()))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


class Pool:
    """world_size spawned ranks sharing one process group."""

    def __init__(self, world_size: int, backend: str = "zipccl", env: dict | None = None, timeout_s: float = 60.0):
        self.world_size = world_size
        self.results = _SPAWN.Queue()
        self.tasks = [_SPAWN.Queue() for _ in range(world_size)]
        port = free_port()
        self.procs = [
            _SPAWN.Process(
                target=_worker,
                args=(r, world_size, port, backend, dict(env or {}), self.tasks[r], self.results, timeout_s),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in self.procs:
            p.start()
        self._collect("ready", 180)

    def _collect(self, what: str, timeout: float) -> list:
        out: list[Any] = [None] * self.world_size
        errors = {}
        pending = set(range(self.world_size))
        while pending:
            try:
                rank, status, value = self.results.get(timeout=timeout)
            except queue.Empty:
                self.close(force=True)
                raise TaskError(f"{what}: ranks {sorted(pending)} did not answer within {timeout}s (hang)")
            pending.discard(rank)
            if status == "error":
                errors[rank] = value
            else:
                out[rank] = value
        if errors:
            msg = "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items()))
            raise TaskError(f"{what} failed on ranks {sorted(errors)}:\n{msg}")
        return out

    def run(self, fn: Callable, *args: Any, timeout: float = 120) -> list:
        for q in self.tasks:
            q.put((fn, args))
        return self._collect(fn.__name__, timeout)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def close(self, force: bool = False) -> None:
        if not force:
            for q in self.tasks:
                q.put(None)
            for p in self.procs:
                p.join(timeout=30)
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join()


def _one_shot(rank: int, world_size: int, port: int, fn, args, env: dict, results) -> None:
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    try:
        results.put((rank, "ok", fn(rank, world_size, *args)))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


def spawn(world_size: int, fn: Callable, *args: Any, env: dict | None = None, timeout: float = 120) -> list:
    """Runs fn(rank, world_size, *args) in fresh spawned processes (for tests
    that break their group, kill ranks, or set up their own)."""
    results = _SPAWN.Queue()
    port = free_port()
    procs = [
        _SPAWN.Process(target=_one_shot, args=(r, world_size, port, fn, args, dict(env or {}), results), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    out: list[Any] = [None] * world_size
    errors = {}
    try:
        for _ in range(world_size):
            try:
                rank, status, value = results.get(timeout=timeout)
            except queue.Empty:
                raise TaskError(f"{fn.__name__}: not every rank answered within {timeout}s (hang)")
            if status == "error":
                errors[rank] = value
            else:
                out[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        msg = "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items()))
        raise TaskError(f"{fn.__name__} failed on ranks {sorted(errors)}:\n{msg}")
    return out


def tmpfile() -> str:
    fd, path = tempfile.mkstemp(prefix="zipccl-test-")
    os.close(fd)
    os.unlink(path)
    return path
