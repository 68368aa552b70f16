"""Multi-process test harness: spawned (never forked) ranks that keep one
process group alive across many test functions, so the suite pays torch's
import cost once per world size rather than once per test.

A task is a module-level function ``fn(ctx, *args)`` run on every rank;
``ctx`` carries the rank, the world size and the groups. Results come back as
a list indexed by rank; an exception on any rank fails the call with every
rank's traceback.

Three ways to run ranks:

* ``Pool(world_size)``: long-lived ranks with a zipccl default group and a
  gloo group (``ctx.gloo``) over the same ranks. tests/conftest.py caches one
  per world size for the whole session (fixture ``pools``).
* ``spawn(world_size, fn, *args)``: fresh processes running
  ``fn(rank, world_size, *args)``, for tests that break groups or kill ranks.
* ``launch(code, world_size)``: fresh ``python3 -c code`` subprocesses, one
  per rank, with RANK/WORLD_SIZE/MASTER_* in the environment, returning each
  rank's exit status, stdout and stderr (logs, signals, network namespaces).
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import multiprocessing as mp
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from typing import Any, Callable

_SPAWN = mp.get_context("spawn")

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# Every rank process (pool, spawn, launch) runs with one intra-op thread: the
# CI box has 2 cores shared by up to 4 ranks.
RANK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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


def _setup_rank(env: dict, rank: int, world_size: int, port: int) -> None:
    os.environ.update(RANK_ENV)
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    import warnings

    import torch

    torch.set_num_threads(1)
    # Deprecated-but-tested APIs (all_gather_coalesced, ...) warn each call.
    warnings.filterwarnings("ignore", category=FutureWarning)


def _worker(rank: int, world_size: int, port: int, backend: str, env: dict, tasks, results, timeout_s: float) -> None:
    _setup_rank(env, rank, world_size, port)
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
    # Skip the interpreter's slow teardown (seconds per rank with torch
    # loaded); clean exits are tested on their own (test_observability.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _health(ctx) -> float:
    import torch
    import torch.distributed as dist

    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(seconds=20)
    t = torch.ones(1)
    dist.distributed_c10d._get_default_group().allreduce([t], opts).wait()
    return t.item()


class Pool:
    """world_size spawned ranks sharing one process group.

    A task that does not come back in time (a hang) kills the pool: ``broken``
    is then True and the session fixture replaces it for the next test.
    """

    def __init__(self, world_size: int, backend: str = "zipccl", env: dict | None = None, timeout_s: float = 60.0):
        self.world_size = world_size
        self.broken = False
        self.suspect = False
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
        deadline = time.monotonic() + timeout
        while pending:
            try:
                rank, status, value = self.results.get(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                dead = {r: self.procs[r].exitcode for r in pending if not self.procs[r].is_alive()}
                if dead and self.results.empty():
                    self.close(force=True)
                    raise TaskError(f"{what}: ranks died (exit codes {dead}) without answering")
                if time.monotonic() < deadline:
                    continue
                self.close(force=True)
                raise TaskError(f"{what}: ranks {sorted(pending)} did not answer within {timeout}s (hang)")
            pending.discard(rank)
            if status == "error":
                errors[rank] = value
            else:
                out[rank] = value
        if errors:
            # The other ranks may have been left in a collective: check the
            # group before the next task (Pools.get does).
            self.suspect = True
            msg = "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items()))
            raise TaskError(f"{what} failed on ranks {sorted(errors)}:\n{msg}")
        return out

    def healthy(self) -> bool:
        """After a failed task: whether the ranks are idle and the group
        still works (else the pool should be replaced)."""
        if self.broken or not self.alive():
            return False
        if not self.suspect:
            return True
        try:
            out = self.run(_health, timeout=90)
        except TaskError:
            return False
        self.suspect = False
        return out == [float(self.world_size)] * self.world_size

    def run(self, fn: Callable, *args: Any, timeout: float = 120) -> list:
        """Runs fn(ctx, *args) on every rank; returns the results by rank."""
        if self.broken or not self.alive():
            raise TaskError(f"{fn.__name__}: the pool of {self.world_size} ranks is no longer usable")
        for q in self.tasks:
            q.put((fn, args))
        return self._collect(fn.__name__, timeout)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def close(self, force: bool = False) -> None:
        self.begin_close(force)
        self.finish_close()

    def begin_close(self, force: bool = False) -> None:
        """Asks the ranks to leave (or kills them when force)."""
        if force:
            self.broken = True
            for p in self.procs:
                if p.is_alive():
                    p.kill()
        else:
            for q in self.tasks:
                q.put(None)

    def finish_close(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join()


def _one_shot(rank: int, world_size: int, port: int, fn, args, env: dict, results) -> None:
    _setup_rank(env, rank, world_size, port)
    try:
        results.put((rank, "ok", fn(rank, world_size, *args)))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


def spawn(world_size: int, fn: Callable, *args: Any, env: dict | None = None, timeout: float = 120) -> list:
    """Runs fn(rank, world_size, *args) in fresh spawned processes (for tests
    that break their group, kill ranks, or set up their own). A rank may
    return without answering only by dying; its slot is then None and the
    others' results still come back."""
    results = _SPAWN.Queue()
    port = free_port()
    procs = [
        # Not daemonic: a rank may start children of its own (DataLoader workers).
        _SPAWN.Process(target=_one_shot, args=(r, world_size, port, fn, args, dict(env or {}), results), daemon=False)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    out: list[Any] = [None] * world_size
    errors = {}
    pending = set(range(world_size))
    deadline = time.monotonic() + timeout
    try:
        while pending:
            try:
                rank, status, value = results.get(timeout=1.0)
            except queue.Empty:
                # A rank that died (killed on purpose) never answers.
                dead = {r for r in pending if not procs[r].is_alive() and procs[r].exitcode is not None}
                if dead and results.empty():
                    time.sleep(0.2)
                    if results.empty():
                        pending -= dead
                        continue
                if time.monotonic() > deadline:
                    raise TaskError(f"{fn.__name__}: ranks {sorted(pending)} did not answer within {timeout}s (hang)")
                continue
            pending.discard(rank)
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


@dataclasses.dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str


def launch(
    code: str,
    world_size: int,
    env: dict | None = None,
    rank_env: Callable[[int], dict] | None = None,
    prefix: Callable[[int], list[str]] | None = None,
    timeout: float = 120,
    master_addr: str = "127.0.0.1",
) -> list[RankResult]:
    """Runs ``python3 -c code`` once per rank (env:// rendezvous variables
    set) and returns every rank's exit status and output. prefix(rank) is
    put before the interpreter (e.g. ``ip netns exec ns0``). A rank still
    running at the timeout is killed (returncode -9)."""
    port = free_port()
    procs = []
    for r in range(world_size):
        e = dict(os.environ)
        e.update(RANK_ENV)
        e["PYTHONPATH"] = os.pathsep.join([TESTS_DIR, e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        e.update(MASTER_ADDR=master_addr, MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(world_size))
        e.update(env or {})
        if rank_env:
            e.update(rank_env(r))
        argv = (prefix(r) if prefix else []) + [sys.executable, "-c", textwrap.dedent(code)]
        procs.append(
            subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        )
    out = []
    deadline = time.monotonic() + timeout
    try:
        for r, p in enumerate(procs):
            try:
                stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_session(p)
                stdout, stderr = p.communicate()
                stderr += f"\n[harness] rank {r} killed after the {timeout}s timeout (hang)"
            out.append(RankResult(r, p.returncode, stdout, stderr))
    finally:
        # a test stopped midway (pytest-timeout's alarm, ^C) leaves no rank
        # running: orphans took the CPU from every later test
        for p in procs:
            if p.poll() is None:
                _kill_session(p)
                p.wait()
        _unlink_deepspeed_shm(master_addr, port)
    return out


def _kill_session(p: subprocess.Popen) -> None:
    """Kills a rank started in a session of its own, with its children."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _unlink_deepspeed_shm(master_addr: str, port: int) -> None:
    """DeepSpeed's CPU accelerator maps a shared-memory workspace per rank
    and group at init_distributed (its shm op, 64 MiB or more each) and
    never unlinks it; named by the job's MASTER_ADDR and MASTER_PORT, so a
    job's own are known. Left behind they filled /dev/shm run after run."""
    for path in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{glob.escape(master_addr)}_{port}_*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def result_lines(res: list[RankResult]) -> list[str]:
    """Each rank's first line starting with "RESULT " (what follows it),
    failing with the rank's output when one has none."""
    lines = []
    for r in res:
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        assert line, f"rank {r.rank} gave no result: {r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        lines.append(line[0][len("RESULT "):])
    return lines


def tmpfile() -> str:
    fd, path = tempfile.mkstemp(prefix="zipccl-test-")
    os.close(fd)
    os.unlink(path)
    return path
