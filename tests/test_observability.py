"""What a user sees of the engine: ZIPCCL_DEBUG logging (levels, the
"time host:pid [rank]" prefix, stderr), ``python -m zipccl info``,
zipccl.stats() per-op counts and bytes, and a clean exit (status 0) of a
process that still has work in flight when the interpreter shuts down."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import zipccl
from harness import launch, result_lines

RUN_OPS = """
import torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl")
t = torch.ones(1000)
dist.all_reduce(t)
dist.broadcast(t, 0)
assert t[0].item() == dist.get_world_size()
dist.destroy_process_group()
print("done")
"""

LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \S+:(\d+) \[([0-9?]+)\].* zipccl (WARN|INFO|TRACE) (.*)$")


def _log_lines(stderr: str) -> list[tuple[int, str, str, str]]:
    out = []
    for line in stderr.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3), m.group(4)))
    return out


def _run_with_level(level):
    env = {} if level is None else {"ZIPCCL_DEBUG": level}
    if level is None:
        env["ZIPCCL_DEBUG"] = ""
    results = launch(RUN_OPS, 2, env=env, timeout=120)
    for r in results:
        assert r.returncode == 0 and "done" in r.stdout, f"rank {r.rank}: rc={r.returncode}\n{r.stderr[-3000:]}"
    return results


def test_debug_levels_and_rank_prefix():
    # One launch per level; the three run concurrently to save wall time.
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(3) as ex:
        info, trace, default = ex.map(_run_with_level, ["INFO", "TRACE", None])

    for r in info:
        lines = _log_lines(r.stderr)
        levels = {lv for _, _, lv, _ in lines}
        assert "INFO" in levels and "TRACE" not in levels, f"rank {r.rank} at INFO logged levels {levels}:\n{r.stderr[-2000:]}"
        ranks = {rk for _, rk, _, _ in lines}
        assert ranks == {str(r.rank)}, f"rank {r.rank}'s log lines carry ranks {ranks}"
        assert len({pid for pid, *_ in lines}) == 1, "one process, one pid in the prefix"
        assert any(f"communicator created: rank {r.rank} of 2" in msg for *_, msg in lines), r.stderr[-2000:]
        assert any("listening on" in msg for *_, msg in lines), "the chosen address is logged at INFO"
    for r in trace:
        lines = _log_lines(r.stderr)
        assert any(lv == "TRACE" for _, _, lv, _ in lines), f"no TRACE lines at TRACE:\n{r.stderr[-2000:]}"
        assert any(lv == "TRACE" and "all_reduce" in msg for _, _, lv, msg in lines), "ops are traced"
    for r in default:
        lines = _log_lines(r.stderr)
        assert not [x for x in lines if x[2] in ("INFO", "TRACE")], f"INFO/TRACE lines by default:\n{r.stderr[-2000:]}"


def test_cli_info():
    proc = subprocess.run([sys.executable, "-m", "zipccl", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    fields = dict(line.split(None, 1) for line in text.splitlines() if line and not line.startswith(" "))
    assert fields["zipccl"].startswith(zipccl.__version__), text
    assert fields["Go"].startswith("go1."), text
    assert fields["torch"].startswith(torch.__version__.split("+")[0]), text
    assert "NCCL" in fields and (fields["NCCL"].startswith("found") or fields["NCCL"].startswith("not found")), text
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    simd = fields["SIMD"].split()
    for flag in ("avx2", "avx512f", "f16c", "fma"):
        if flag in flags:
            assert any(flag.replace("_", "") in s.lower().replace("_", "") for s in simd), f"{flag} missing from SIMD line {simd}"
    has_gpu = os.path.exists("/dev/nvidia0")
    if not has_gpu:
        assert fields["GPUs"].startswith("none"), text

    proc = subprocess.run([sys.executable, "-m", "zipccl", "info", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("zipccl_version", "go_version", "cpu", "gpus", "nccl"):
        assert key in data, data
    assert data["cpu"].get("logical_cores") == os.cpu_count() or data["cpu"].get("logical_cores"), data["cpu"]
    if not has_gpu:
        assert data["gpus"] in ([], None), data["gpus"]


def task_stats(ctx):
    ws, me = ctx.world_size, ctx.rank
    g = dist.new_group()  # fresh counters
    before_world = zipccl.stats()
    for _ in range(3):
        dist.all_reduce(torch.ones(1000), group=g)
    for _ in range(2):
        dist.broadcast(torch.ones(10, dtype=torch.int8), src=0, group=g)
    dist.all_gather([torch.empty(5, dtype=torch.float64) for _ in range(ws)], torch.ones(5, dtype=torch.float64), group=g)
    try:
        # A failing op counts as an error (ranks disagree on the size).
        dist.all_reduce(torch.ones(3 + me), group=g)
    except RuntimeError:
        pass
    s = zipccl.stats(g)
    after_world = zipccl.stats()
    try:
        zipccl.stats(ctx.gloo)
        gloo_err = None
    except RuntimeError as e:
        gloo_err = str(e)
    return s, before_world, after_world, gloo_err


@pytest.mark.parametrize("ws", [2])
def test_stats(pools, ws):
    out = pools.get(ws).run(task_stats)
    for rank, (s, before_world, after_world, gloo_err) in enumerate(out):
        assert s["rank"] == rank and s["size"] == ws, s
        ops = s["ops"]
        ar, bc, ag = ops["all_reduce"], ops["broadcast"], ops["all_gather"]
        assert ar["count"] == 4 and ar["errors"] == 1, ar
        assert ar["raw_bytes"] == 3 * 4000 + 4 * (3 + rank), ar
        assert ar["wire_bytes"] > 0 and ar["seconds"] > 0, ar
        assert bc["count"] == 2 and bc["errors"] == 0 and bc["raw_bytes"] == 20, bc
        assert ag["count"] == 1 and ag["raw_bytes"] == 40, ag
        # small calls stay with the model's raw choice; feedback never ran
        assert ar["feedback_overrides"] == 0 and ar["choices"] == {"raw": 4}, ar
        if rank == 0:
            assert bc["wire_bytes"] >= 20, "the root sends the broadcast payload"
        assert before_world == after_world, "a subgroup's ops counted on the world group"
        assert gloo_err and "no zipccl backend" in gloo_err, gloo_err


EXIT_IN_FLIGHT = """
import os, sys, tempfile, time, torch, torch.distributed as dist, zipccl
store = dist.FileStore(tempfile.mktemp(), 1)
dist.init_process_group("zipccl", rank=0, world_size=1, store=store)
for i in range(400):
    w = dist.all_reduce(torch.ones(1000), async_op=True)
    w.get_future().then(lambda f: f.value())
print("exiting")
"""


def test_clean_exit_with_work_in_flight():
    """Regression: the completion thread dropping the last reference to a
    work (and to tensors Python had seen) while the interpreter finalized
    took the GIL, was ended by Python with pthread_exit inside a noexcept
    destructor, and the process aborted ("terminate called without an
    active exception", status 134) about one run in three. Several runs
    at once to catch a regression with high probability."""
    results = launch(EXIT_IN_FLIGHT, 6, timeout=120)
    bad = [r for r in results if r.returncode != 0 or "exiting" not in r.stdout]
    assert not bad, "\n".join(f"run {r.rank}: status {r.returncode}: {r.stderr[-500:]}" for r in bad)


LINK = r"""
import datetime, torch, torch.distributed as dist, zipccl
dist.init_process_group("zipccl", timeout=datetime.timedelta(seconds=30))
before = zipccl.link_model()
x = torch.randn(1 << 20, dtype=torch.bfloat16)
dist.all_reduce(x)  # the first op the switcher could code: the group measures itself
m = zipccl.link_model()
print("RESULT", before, m.latency_s, m.bytes_per_s, m.local, flush=True)
dist.destroy_process_group()
"""


def test_link_model_is_measured_once_and_agreed():
    lines = result_lines(launch(LINK, 2, timeout=120))
    before, latency, bw, local = lines[0].split()
    assert before == "None", "not measured before the first codable op"
    assert 0 < float(latency) < 0.1 and float(bw) > 1e7 and local == "True", lines[0]
    assert lines[1] == lines[0], "the same model on every rank"
