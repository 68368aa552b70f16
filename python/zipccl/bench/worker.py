"""One rank of ``python -m zipccl bench collectives`` (started by the
harness, one process per rank, configuration as JSON in argv[1]).

Every backend under test gets its own group over the same ranks, in the same
processes, on the same links; a third, gloo group carries the benchmark's
own barriers and result reductions so they never share a group with a
measured op. For each (dtype, op, size) the rank

1. runs the op once per backend on the same input and compares each result
   with the first backend's (gloo's when given): the correctness check;
2. warms up, and estimates how many calls fit the time budget (the same
   count for every backend);
3. times ``rounds`` rounds, alternating the backends and rotating which goes
   first, so slow drift (another process waking up) hits both alike;
4. reduces over ranks: per round the slowest rank's mean time per call, and
   the bytes each backend sent (zipccl's own counters; the kernel's NIC
   counters when the rank has its own interface).

Rank 0 prints one ``@zipccl-bench {json}`` line per event for the parent.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from . import data as bench_data
from .ops import Bound, a2a_splits, abs_sum, bind, compare, input_numel, lossy_tolerance, reorder_tolerance
from .specs import OPS, OpSpec, align_size, parse_backend

EVENT_PREFIX = "@zipccl-bench "
_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}


def emit(kind: str, **fields: Any) -> None:
    print(EVENT_PREFIX + json.dumps({"event": kind, **fields}), flush=True)


def _nic_counter() -> int:
    """Bytes this rank's own interface has sent, or -1 without one."""
    ifname = os.environ.get("ZIPCCL_BENCH_NIC")
    if not ifname:
        return -1
    try:
        with open(f"/sys/class/net/{ifname}/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return -1


class Meter:
    """Per-backend bytes sent during timed calls: zipccl's stats counters
    (payload bytes, after compression) and the NIC's (everything, headers
    included)."""

    def __init__(self, backend: str, group, control) -> None:
        self.backend = backend
        self.group = group
        self.control = control
        self.wire = 0
        self.raw = 0
        self.nic = 0
        self.codec_s = 0.0
        self.calls = 0
        self.choices: dict[str, int] = {}

    def _snapshot(self) -> tuple[int, int, int, float, dict[str, int]]:
        wire = raw = 0
        codec = 0.0
        choices: dict[str, int] = {}
        if self.backend.startswith("zipccl"):
            import zipccl

            for st in zipccl.stats(self.group).get("ops", {}).values():
                wire += int(st.get("wire_bytes", 0))
                raw += int(st.get("raw_bytes", 0))
                codec += float(st.get("codec_seconds", 0.0))
                for name, count in (st.get("choices") or {}).items():
                    choices[name] = choices.get(name, 0) + int(count)
        return wire, raw, _nic_counter(), codec, choices

    def measure(self, bound: Bound, iters: int) -> float:
        """Mean seconds per call over iters timed calls (a call on CUDA
        tensors ends when the device has finished it)."""
        w0, r0, n0, c0, ch0 = self._snapshot()
        total = 0.0
        for _ in range(iters):
            bound.prepare()
            _sync(bound)
            t0 = time.perf_counter()
            bound.call()
            _sync(bound)
            total += time.perf_counter() - t0
        # A rank's op can end while its last bytes still sit in its socket
        # and qdisc; once every rank has finished, they have all left.
        dist.barrier(group=self.control)
        w1, r1, n1, c1, ch1 = self._snapshot()
        self.wire += w1 - w0
        self.raw += r1 - r0
        self.codec_s += c1 - c0
        for name, count in ch1.items():
            if count - ch0.get(name, 0):
                self.choices[name] = self.choices.get(name, 0) + count - ch0.get(name, 0)
        self.nic += (n1 - n0) if n0 >= 0 else 0
        self.calls += iters
        return total / iters


def _sync(bound: Bound) -> None:
    if bound.result.is_cuda:
        torch.cuda.synchronize(bound.result.device)


def _agree_max(value: float, control) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
    return float(t.item())


def run_case(cfg: dict, spec: OpSpec, dtype_name: str, size: int, groups: dict, control,
             rank: int, n: int, device: torch.device) -> list[dict]:
    dtype = _DTYPES[dtype_name]
    itemsize = torch.empty(0, dtype=dtype).element_size()
    size = align_size(size, itemsize, n, spec)
    count = size // itemsize
    splits = a2a_splits(count, n, cfg["a2a_skew"]) if spec.name == "all_to_all" and cfg.get("a2a_skew") else None
    numel = sum(splits[rank]) if splits else input_numel(spec, count, n)
    inp = bench_data.make_input(cfg["data"], numel, dtype, rank, n, seed=cfg["seed"] + size).to(device)
    backends = list(groups)
    bounds = {b: bind(spec, groups[b], inp, rank, n, splits) for b in backends}

    # 1. correctness: the same input through every backend. A backend that
    # refuses the op (gloo has no CUDA reduce_scatter) refuses it on every
    # rank before sending anything: it sits this case out.
    for b in list(backends):
        bounds[b].prepare()
        refused = 0.0
        try:
            bounds[b].call()
            _sync(bounds[b])
        except RuntimeError as exc:
            if not b.startswith("gloo"):
                raise  # zipccl serves every op: a failure is a failure
            refused = 1.0
            if rank == 0:
                print(f"{b} refuses {spec.name} on {device.type} tensors: {str(exc).splitlines()[0][:200]}", flush=True)
        if _agree_max(refused, control):
            backends.remove(b)
    ref_backend = "gloo" if "gloo" in backends else backends[0]
    total = abs_sum(inp, spec, control, n, rank) if spec.reduces and inp.dtype.is_floating_point else None
    tol = reorder_tolerance(inp, total, n) if total is not None else None
    checks: dict[str, tuple[str, float]] = {}
    for b in backends:
        if b == ref_backend:
            continue
        btol = tol
        modes = parse_backend(b).lossy_policy()
        if modes and spec.name in modes:
            btol = lossy_tolerance(spec, bounds[ref_backend].result, n, modes, total)
        verdict, maxdiff = compare(spec, bounds[b].result, bounds[ref_backend].result, btol)
        code = {"exact": 0, "ok": 1, "FAIL": 2}[verdict]
        worst = torch.tensor([code, maxdiff], dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=control)
        checks[b] = (["exact", "ok", "FAIL"][int(worst[0])], float(worst[1]))
    del tol, total

    # 2. warm-up, and a call count that fits the budget.
    est = 0.0
    for b in backends:
        for _ in range(cfg["warmup"]):
            bounds[b].prepare()
            t0 = time.perf_counter()
            bounds[b].call()
            est = max(est, time.perf_counter() - t0)
    est = _agree_max(max(est, 1e-6), control)
    iters = max(1, min(cfg["iters"], int(cfg["round_budget_s"] / est)))

    # 3. alternating timed rounds.
    meters = {b: Meter(b, groups[b], control) for b in backends}
    times: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(cfg["rounds"]):
        order = backends[r % len(backends):] + backends[:r % len(backends)]
        for b in order:
            dist.barrier(group=control)  # every rank starts the round together
            times[b].append(meters[b].measure(bounds[b], iters))

    # 4. reduce over ranks.
    rows = []
    for b in backends:
        slowest = torch.tensor(times[b], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=control)
        m = meters[b]
        sums = torch.tensor([m.wire, m.raw, m.nic, m.codec_s / n], dtype=torch.float64)
        dist.all_reduce(sums, group=control)
        per_call = sums / m.calls
        rows.append({
            "backend": b,
            "device": device.type,
            "op": spec.name,
            "dtype": dtype_name,
            "bytes": size,
            "count": count,
            "redop": spec.redop,
            "iters": iters,
            "rounds_us": [round(t * 1e6, 1) for t in slowest.tolist()],
            "time_us": statistics.median(slowest.tolist()) * 1e6,
            "zipccl_wire_bytes": float(per_call[0]) if b.startswith("zipccl") else None,
            "zipccl_raw_bytes": float(per_call[1]) if b.startswith("zipccl") else None,
            "nic_bytes": float(per_call[2]) if os.environ.get("ZIPCCL_BENCH_NIC") else None,
            # zipccl only: the switcher's choice (as rank 0 saw it; every
            # rank takes the same), and coding time per call, mean over ranks.
            "choice": max(m.choices, key=m.choices.get) if m.choices else None,
            "codec_us": float(per_call[3]) * 1e6 if b.startswith("zipccl") else None,
            "check": "ref" if b == ref_backend and len(backends) > 1 else
                     checks.get(b, ("-", 0.0))[0],
            "maxdiff": checks.get(b, ("-", 0.0))[1],
            "splits": f"skew {cfg['a2a_skew']:g}" if splits else "even",
            # an uneven all_to_all sends what leaves each rank, uncoded
            "nominal_wire_bytes": (sum(x for r, row in enumerate(splits) for j, x in enumerate(row) if j != r)
                                   * itemsize if splits else None),
        })
    return rows


def new_group(entry: str, timeout: datetime.timedelta):
    """The group of one --backends entry (specs.BackendSpec)."""
    spec = parse_backend(entry)
    if spec.name == "zipccl" and (spec.mode or spec.path or spec.encrypt or spec.flat or spec.lossy):
        import zipccl

        return dist.new_group(backend="zipccl", timeout=timeout,
                              pg_options=zipccl.Options(compression=spec.mode or None, gpu_path=spec.path or None,
                                                        encrypt=spec.encrypt or None, lossy=spec.lossy_policy(),
                                                        lossy_min_bytes=0 if spec.lossy else None,
                                                        extra={"hierarchy": "flat"} if spec.flat else {}))
    return dist.new_group(backend=spec.name, timeout=timeout)


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    device = torch.device("cpu")
    if cfg.get("device") == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if any(b.startswith("zipccl") for b in cfg["backends"]):
        import zipccl  # noqa: F401  (registers the backend)
    timeout = datetime.timedelta(seconds=cfg["timeout_s"])
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timeout)
    control = dist.group.WORLD
    groups = {b: new_group(b, timeout) for b in cfg["backends"]}
    if rank == 0:
        info: dict[str, Any] = {"torch": torch.__version__, "threads": torch.get_num_threads()}
        if "zipccl" in groups:
            import zipccl

            info["zipccl"] = zipccl.__version__
            try:
                info["go"] = zipccl.info().get("go_version")
            except Exception:  # informational only
                pass
        emit("start", **info)
    if cfg["data"] == "real":
        bench_data.real_source()  # fail early, on every rank, with the install hint
    done = 0
    for dtype_name in cfg["dtypes"]:
        for op in cfg["ops"]:
            for size in cfg["sizes"]:
                rows = run_case(cfg, OPS[op], dtype_name, size, groups, control, rank, n, device)
                done += 1
                if rank == 0:
                    for row in rows:
                        emit("row", **row)
                    emit("progress", done=done, label=f"{op} {dtype_name} {size}")
    dist.barrier(group=control)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except bench_data.RealDataUnavailable as exc:
        print(f"zipccl bench: {exc}", file=sys.stderr)
        sys.exit(3)
