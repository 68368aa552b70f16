"""``python -m zipccl demo`` (and ``make demo``): the same GPT training with
gloo and with zipccl, DDP then FSDP2, on 4 ranks over 1 Gbit/s links.

Three trainings share one network: gloo and zipccl as configured (its
default: compression on above a size threshold), side by side in one
launch; then zipccl with ZIPCCL_COMPRESS=never in a second launch. The
third is what makes "lossless" a checked claim: its losses must equal the
second's bit for bit.

``--lossy zero++`` trains FSDP2 with ZeRO++'s three parts instead: hpZ
(parameters resharded to each host's ranks after forward, on hosts of
several ranks), and on a zipccl group whose lossy policy all-gathers
parameters as int8 (qwZ) and reduce-scatters gradients as int4 (qgZ),
alternating in one launch with lossless zipccl and gloo (both with hpZ
too, so that only the communication differs). Its defaults are 2 hosts
of 2 ranks and 100 Mbit/s links: there gloo's step is bound by the
network (about 14 MB per host NIC per step, over a second, against about
a quarter of a second of compute on this machine), which is where
quantized collectives are meant to pay.

``--lossy tp-fp8`` trains with torch's tensor parallelism instead
(``parallelize_module``: qkv and fc column-wise, proj and out row-wise, the
LayerNorms sequence-parallel; model.tensor_parallel), the whole world one
TP group, on a zipccl group whose all_reduce, all_gather and
reduce_scatter are TACO's fp8 (E4M3 of Hadamard-transformed blocks),
alternating in one launch with lossless zipccl and gloo. Its defaults are
the harness's: 4 ranks, each its own host behind a 1 Gbit/s link, so all
TP traffic crosses the shaped links (hosts of several ranks would keep it
in memory). min_bytes is set to the smallest activation collective, the
position embeddings' (seq_len, d_model) float32, so every activation is
coded and the parameter gradients' all_reduces (d_model floats at most)
stay exact. A TP group shares its batch, so ``--batch`` counts the
group's sequences, 16 by default: the default demo's global batch (4
ranks x 4), and enough to make the link matter. The activations per
step grow with the batch while the step's fixed cost (about a hundred
collectives, DTensor's dispatch) does not; at 4 sequences gloo's step is
bound by the collectives' latency more than by bytes. 8 heads instead of
6 (at the default d_model), so that each rank gets whole heads.

``--dp-hook edgc`` trains DDP with gradient compression hooks instead,
alternating in one launch on zipccl groups: plain DDP, PowerSGD at fixed
ranks (--psgd-rank, default 24 and 96) and zipccl.hooks' EDGC (r_min 4,
r_max None: from the link zipccl measured, the hook's own compression
time, and its measured steps; windows of 5 steps, entropy sampled every
step: the paper's 1000 and 1/alpha = 10 would leave no window to act in
100 steps). The
fixed-rank runs are EDGCState with r_min = r_max, not torch's powerSGD_hook,
which fails on CPU tensors (see DP_HOOK_LAUNCHES), so they share EDGC's
start rule: compression from the first window after warm-up whose
entropy is below the first window's. The equal-bytes check interpolates
the fixed ranks' final losses linearly in bytes per step at EDGC's bytes;
bytes are not linear in rank (at high ranks fewer matrices pass
min_compression_rate), hence two ranks around EDGC's bytes rather than one
rank of EDGC's mean. Where EDGC sent more bytes than every fixed rank the
check fails and says so. Defaults: 4 ranks, one per host, 100 Mbit/s. Unshaped
(`--dp-hook edgc --no-netns --steps 12`) a plain DDP step took 165 ms on
this 2-core machine; shaped, plain DDP's float32 gradients put 39.0 MB a
step on the four NICs (RESULTS (m)), about 0.8 s at 100 Mbit/s and 0.08 s
at 1 Gbit/s: at 100 Mbit/s the step is bound by the link, at 1 Gbit/s by compute.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from datetime import datetime
from typing import Any

from ..netharness import (IFNAME, TCP_CC_HELP, HostLayout, LinkSpec, Network, NetworkError, RanksFailed,
                          add_layout_arguments, launch_ranks)
from . import report
from .train import EVENT_PREFIX

# Two launches on one network. The first trains gloo and zipccl side by side
# (alternating steps, see train.py); the second trains zipccl alone with
# compression off, a separate run whose losses must match the first's zipccl
# bit for bit. key -> label; launch -> ({key: backend}, extra environment).
LABELS = {"gloo": "gloo", "zipccl": "zipccl", "zipccl-off": "zipccl, compression off",
          "zipccl-zpp": "zipccl ZeRO++ (int8+int4)", "zipccl-fp8": "zipccl TP fp8",
          "zipccl-edgc": "zipccl EDGC"}
FIXED_RUN = report.FIXED_RUN
LAUNCHES = [
    ({"gloo": "gloo", "zipccl": "zipccl"}, {}),
    ({"zipccl-off": "zipccl"}, {"ZIPCCL_COMPRESS": "never"}),
]
DEFAULT_WORLD_SIZE = 4
SEQ_LEN = 128

# --lossy: one launch of three runs; the lossy run's key and policy, and
# the defaults that differ from the lossless demo's.
LOSSY_LAUNCHES = {
    "zero++": [({"gloo": "gloo", "zipccl": "zipccl", "zipccl-zpp": "zipccl"}, {})],
    "tp-fp8": [({"gloo": "gloo", "zipccl": "zipccl", "zipccl-fp8": "zipccl"}, {})],
}
LOSSY_RUN = {"zero++": "zipccl-zpp", "tp-fp8": "zipccl-fp8"}
LOSSY_MODES = {"zero++": {"fsdp", "hpz"}, "tp-fp8": {"tp"}}
ZERO_PP_POLICY = {"all_gather": "int8", "reduce_scatter": "int4"}
TP_FP8_POLICY = {"all_reduce": "fp8", "all_gather": "fp8", "reduce_scatter": "fp8"}
ZERO_PP_LINK = "100mbit"
DEFAULT_BATCH = 4
TP_BATCH = 16

# --dp-hook edgc: one launch of three DDP runs on zipccl groups, plain,
# with PowerSGD at a fixed rank and with EDGC. The fixed-rank run is
# EDGCState with r_min = r_max, not torch's powerSGD_hook: torch's hook
# waits, inside a future's callback, for the all-reduce it has just issued
# there, and issues its second and third all-reduces from those callbacks,
# so ranks may issue collectives in different orders. On CPU tensors it
# fails at its first compressed step, on zipccl with "ranks disagree on the
# operation" on every rank (tests/test_callbacks.py; it hung before zipccl
# ran a blocked callback's completions on another thread) and on gloo (2
# ranks: "Received data size doesn't match expected size. Is there a
# distributed collective mismatch").
DP_HOOK_LAUNCHES = {"edgc": [({"zipccl": "zipccl", "zipccl-edgc": "zipccl"}, {})]}  # and --psgd-rank's runs
DP_HOOK_LINK = "100mbit"
EDGC_WARMUP_FRACTION = 0.1  # the paper's, and torch's advice for start_powerSGD_iter
EDGC_R_MIN = 4
EDGC_WINDOW = 5
EDGC_ALPHA = 1.0
PSGD_RANKS = "24,96"  # around EDGC's bytes: see the docstring


def configure(p: argparse.ArgumentParser) -> None:
    add_layout_arguments(p, DEFAULT_WORLD_SIZE)
    p.add_argument("--lossy", choices=tuple(LOSSY_LAUNCHES), default=None,
                   help="zero++: FSDP2 with hpZ, int8 parameter all-gathers and int4 gradient reduce-scatters "
                        "against lossless zipccl and gloo (defaults: 2 hosts x 2 ranks, --link-rate 100mbit); "
                        "tp-fp8: tensor parallelism over all ranks (sequence-parallel), TACO's fp8 for "
                        "all_reduce, all_gather and reduce_scatter, against lossless zipccl and gloo "
                        "(defaults: 4 ranks, one per host, 1gbit, --batch 16)")
    p.add_argument("--dp-hook", choices=tuple(DP_HOOK_LAUNCHES), default=None,
                   help="edgc: DDP on zipccl plain, with PowerSGD at a fixed rank (--psgd-rank) and "
                        f"with zipccl.hooks' EDGC (r_max from the measured link) (defaults: 4 ranks, "
                        f"--link-rate {DP_HOOK_LINK})")
    p.add_argument("--psgd-rank", default=PSGD_RANKS,
                   help=f"--dp-hook: the fixed-rank PowerSGD runs' ranks, a comma list: EDGC's loss is compared "
                        f"with theirs interpolated at EDGC's bytes (default {PSGD_RANKS})")
    p.add_argument("--link-rate", default=None,
                   help="per-host link rate (each host's NIC) when root (default 1gbit; 100mbit with --lossy zero++ "
                        f"and {DP_HOOK_LINK} with --dp-hook)")
    p.add_argument("--delay", default=None, help="one-way delay, e.g. 100us")
    p.add_argument("--tcp-cc", default=None, help=TCP_CC_HELP)
    p.add_argument("--no-netns", action="store_true", help="loopback, unshaped")
    p.add_argument("--steps", type=int, default=100, help="training steps per run (default 100)")
    p.add_argument("--modes", default=None,
                   help="comma list of ddp, fsdp, hpz (FSDP2 resharding to each host's ranks after forward: "
                        "ZeRO++'s hpZ); default ddp,fsdp, and hpz too with several ranks per host "
                        "(--lossy tp-fp8: tp, tensor parallelism, its only mode)")
    p.add_argument("--batch", type=int, default=None,
                   help=f"sequences of 128 bytes per rank per step (default {DEFAULT_BATCH}); with --lossy tp-fp8 "
                        f"per step, all ranks training on the same ones (default {TP_BATCH})")
    p.add_argument("--comm-dtype", choices=("mixed", "bfloat16", "float32"), default="mixed",
                   help="what travels: mixed = DDP fp32 gradients, FSDP2 bf16 parameters and fp32 gradients "
                        "(default); bfloat16 or float32 = everything in that type (--lossy tp-fp8: float32 "
                        "activations, bfloat16 is refused)")
    p.add_argument("--compress", choices=("auto", "always"), default=None,
                   help="ZIPCCL_COMPRESS for the zipccl run (default: the engine's default)")
    p.add_argument("--d-model", type=int, default=192)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join("benchmarks", "results"),
                   help="where the plot and the JSON go (default benchmarks/results)")
    p.add_argument("--quiet", "-q", action="store_true", help="print every 10th step only")


def _heads(args: argparse.Namespace, world_size: int) -> int:
    """One head per 32 of d_model; under TP a multiple of the TP size, the
    nearest, so that each rank holds whole heads."""
    heads = max(1, args.d_model // 32)
    if args.lossy == "tp-fp8":
        heads = world_size * max(1, round(heads / world_size))
    return heads


def tp_fp8_min_bytes(args: argparse.Namespace) -> int:
    """The smallest activation collective of TP training: the position
    embeddings' reduce-scatter, (seq_len, d_model) float32. The blocks'
    are (batch, seq_len, d_model), the head's logits (batch, seq_len, 256);
    the replicated parameters' gradients (LayerNorms, row-wise biases,
    d_model floats each) are far below it and stay exact."""
    return SEQ_LEN * args.d_model * 4


def _batch(args: argparse.Namespace) -> int:
    return args.batch or (TP_BATCH if args.lossy == "tp-fp8" else DEFAULT_BATCH)


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    if args.lossy == "tp-fp8":
        return {**TP_FP8_POLICY, "min_bytes": tp_fp8_min_bytes(args)}
    return ZERO_PP_POLICY


def _dp_hook_launches(args: argparse.Namespace) -> list[tuple[dict[str, str], dict[str, str]]]:
    """--dp-hook's one launch: plain DDP, the fixed ranks', EDGC."""
    [(runs, extra)] = DP_HOOK_LAUNCHES[args.dp_hook]
    fixed = {FIXED_RUN + str(r): "zipccl" for r in args.psgd_ranks}
    return [({"zipccl": runs["zipccl"], **fixed, "zipccl-edgc": runs["zipccl-edgc"]}, extra)]


def _dp_hooks(args: argparse.Namespace, runs: dict[str, str]) -> dict[str, dict[str, Any]]:
    if not args.dp_hook:
        return {}
    edgc = {"window": EDGC_WINDOW, "alpha": EDGC_ALPHA, "warmup_fraction": EDGC_WARMUP_FRACTION}
    hooks = {FIXED_RUN + str(r): {**edgc, "r_min": r, "r_max": r} for r in args.psgd_ranks}
    hooks["zipccl-edgc"] = {**edgc, "r_min": EDGC_R_MIN, "r_max": None}
    return {k: v for k, v in hooks.items() if k in runs}


def _train_config(args: argparse.Namespace, runs: dict[str, str], modes: list[str],
                  world_size: int) -> dict[str, Any]:
    lossy_run = LOSSY_RUN.get(args.lossy or "")
    return {
        "runs": runs,
        "lossy": {lossy_run: _policy(args)} if lossy_run in runs else {},
        "dp_hooks": _dp_hooks(args, runs),
        "modes": modes,
        "steps": args.steps,
        "batch": _batch(args),
        "comm_dtype": args.comm_dtype,
        "lr": args.lr,
        "seed": args.seed,
        "timeout_s": 300,
        "corpus_bytes": 8 << 20,
        "model": {"d_model": args.d_model, "n_layers": args.layers, "n_heads": _heads(args, world_size),
                  "seq_len": SEQ_LEN},
    }


def _launch(net: Network, runs: dict[str, str], extra: dict[str, str], args: argparse.Namespace,
            modes: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Trains the runs in one launch; returns {run key: {mode: summary}}."""
    env = dict(extra)
    if "zipccl" in runs and args.compress:
        env["ZIPCCL_COMPRESS"] = args.compress
    if net.mode == "netns":
        env["ZIPCCL_BENCH_NIC"] = IFNAME  # read by each host's local rank 0
    summaries: dict[str, dict[str, dict[str, Any]]] = {key: {} for key in runs}

    def on_line(rank: int, line: str) -> None:
        if not line.startswith(EVENT_PREFIX):
            if "rror" in line or "Traceback" in line:
                print(f"  [rank {rank}] {line}", flush=True)
            return
        ev = json.loads(line[len(EVENT_PREFIX):])
        kind = ev.pop("event")
        if kind == "step":
            if not args.quiet or ev["step"] % 10 == 0 or ev["step"] == args.steps - 1:
                print(f"  {report.MODE_NAMES[ev['mode']]:<5} {LABELS[ev['run']]:<24} step {ev['step']:>4}  "
                      f"loss {ev['loss']:.4f}  {ev['time_s'] * 1e3:7.1f} ms", flush=True)
        elif kind == "summary":
            summaries[ev["run"]][ev["mode"]] = ev
        elif kind == "start" and "gloo" in runs:
            print(f"corpus: {ev['corpus']}", flush=True)

    names = " and ".join(LABELS[k] for k in runs)
    how = ", alternating steps" if len(runs) > 1 else ""
    setting = f" ({', '.join(f'{k}={v}' for k, v in env.items() if k.startswith('ZIPCCL_COMPRESS'))})" \
        if any(k.startswith("ZIPCCL_COMPRESS") for k in env) else ""
    print(f"\n== {names}{setting}{how} ==", flush=True)
    # Rank 0 prints a line a step, so a run that prints nothing for 600 s
    # (twice the groups' collective timeout, which reports a hung collective
    # first) has stalled. The total is only a backstop: a step's time is the
    # machine's: on a CPU without AVX512-BF16, FSDP2's bf16 matmuls make the
    # zero++ demo's 100 steps take over 900 s.
    launch_ranks(net, ["-m", "zipccl.demo.train", json.dumps(_train_config(args, runs, modes, net.world_size))],
                 env=env, on_line=on_line, timeout_s=3600 * max(1.0, args.steps / 100), stall_s=600)
    return summaries


def run(args: argparse.Namespace) -> int:
    """Entry point; a network that cannot be built is a clear error."""
    try:
        return _run(args)
    except NetworkError as exc:
        print(f"zipccl demo: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        if args.lossy == "zero++" and args.world_size is None and args.hosts is None \
                and args.ranks_per_host is None and args.host_sizes is None:
            layout = HostLayout(2, 2)
        else:
            layout = HostLayout.from_args(args.world_size, args.hosts, args.ranks_per_host, DEFAULT_WORLD_SIZE,
                                           args.host_sizes)
        rate = args.link_rate or (ZERO_PP_LINK if args.lossy == "zero++" else DP_HOOK_LINK if args.dp_hook
                                  else "1gbit")
        link = LinkSpec.parse(rate, args.delay, args.tcp_cc)
    except ValueError as exc:
        print(f"zipccl demo: {exc}", file=sys.stderr)
        return 2
    if args.lossy and args.dp_hook:
        print("zipccl demo: --lossy and --dp-hook are separate demos: give one", file=sys.stderr)
        return 2
    if args.dp_hook:
        default_modes = "ddp"
        if args.comm_dtype == "bfloat16":
            print("zipccl demo: --dp-hook compresses float32 gradients: --comm-dtype bfloat16 does not apply",
                  file=sys.stderr)
            return 2
        try:
            args.psgd_ranks = sorted({int(r) for r in args.psgd_rank.split(",") if r.strip()})
        except ValueError:
            args.psgd_ranks = []
        if not args.psgd_ranks or args.psgd_ranks[0] < 1:
            print(f"zipccl demo: --psgd-rank wants ranks of at least 1, comma-separated, not {args.psgd_rank!r}",
                  file=sys.stderr)
            return 2
        for r in args.psgd_ranks:
            LABELS[FIXED_RUN + str(r)] = f"zipccl PowerSGD rank {r}"
    elif args.lossy == "zero++":
        # ZeRO++: FSDP2, with hpZ where hosts have several ranks
        default_modes = "hpz" if layout.ranks_per_host > 1 and layout.equal else "fsdp"
    elif args.lossy == "tp-fp8":
        default_modes = "tp"
        if args.comm_dtype == "bfloat16":
            print("zipccl demo: --lossy tp-fp8 trains in float32: --comm-dtype bfloat16 does not apply",
                  file=sys.stderr)
            return 2
        heads = _heads(args, layout.world_size)
        if SEQ_LEN % layout.world_size or args.d_model % heads:
            print(f"zipccl demo: --lossy tp-fp8 splits {SEQ_LEN} positions and {heads} heads of --d-model "
                  f"{args.d_model} over {layout.world_size} ranks: they must divide evenly", file=sys.stderr)
            return 2
    else:
        default_modes = "ddp,fsdp,hpz" if layout.ranks_per_host > 1 and layout.equal else "ddp,fsdp"
    modes = [m.strip() for m in (args.modes or default_modes).split(",") if m.strip()]
    if args.lossy and (len(modes) != 1 or modes[0] not in LOSSY_MODES[args.lossy]):
        allowed = " or ".join(sorted(LOSSY_MODES[args.lossy]))
        print(f"zipccl demo: --lossy {args.lossy} trains one mode: --modes {allowed}", file=sys.stderr)
        return 2
    if args.dp_hook and modes != ["ddp"]:
        print("zipccl demo: --dp-hook trains DDP only: --modes ddp", file=sys.stderr)
        return 2
    if not modes or any(m not in report.MODE_NAMES for m in modes) or ("tp" in modes and not args.lossy):
        print("zipccl demo: --modes takes a comma list of ddp, fsdp, hpz (tp: with --lossy tp-fp8)",
              file=sys.stderr)
        return 2
    if "hpz" in modes and (layout.ranks_per_host < 2 or not layout.equal):
        print("zipccl demo: hpz reshards to each host's ranks: it needs --ranks-per-host 2 or more, "
              "the same on every host", file=sys.stderr)
        return 2
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    with Network(layout.world_size, link, use_netns=not args.no_netns, layout=layout) as net:
        print(f"zipccl demo: a byte-level GPT on {layout.describe()}, {args.steps} steps per run, "
              f"{' then '.join(report.MODE_NAMES[m] for m in modes)}")
        print(f"network: {net.describe()}")
        if net.mode != "netns":
            print("network: NOT shaped; step times show CPU cost, not what a slow link costs")
        if args.lossy == "tp-fp8":
            heads = _heads(args, layout.world_size)
            print(f"TP over all {layout.world_size} ranks: {heads} heads ({heads // layout.world_size} a rank), "
                  f"{_batch(args)} sequences of {SEQ_LEN} bytes a step, the same on every rank")
            print(f"{LABELS['zipccl-fp8']}: {', '.join(f'{op}={m}' for op, m in TP_FP8_POLICY.items())} on "
                  f"float32 tensors of >= {tp_fp8_min_bytes(args)} bytes (min_bytes: the smallest activation "
                  f"collective, the position embeddings' ({SEQ_LEN}, {args.d_model}) float32; "
                  f"parameter gradients stay exact)")
        try:
            if args.dp_hook:
                _describe_dp_hooks(args)
            launches = LOSSY_LAUNCHES[args.lossy] if args.lossy else _dp_hook_launches(args) \
                if args.dp_hook else LAUNCHES
            for launch_runs, extra in launches:
                runs.update(_launch(net, launch_runs, extra, args, modes))
        except RanksFailed as exc:
            print(f"zipccl demo: {exc}", file=sys.stderr)
            return 1
        network = net.describe()
    labels = LABELS
    print("\n== results ==")
    if args.dp_hook:
        _print_dp_hook_results(runs, net.mode == "netns")
    else:
        _print_results(runs, labels, modes, args, net.mode == "netns")
    verdicts = report.checks(runs, modes, args.comm_dtype)
    if args.lossy == "zero++":
        verdicts += report.zero_pp_checks(runs, modes)
    elif args.lossy == "tp-fp8":
        verdicts += report.tp_fp8_checks(runs, modes)
    elif args.dp_hook:
        verdicts += report.dp_hook_checks(runs)
    print()
    for c in verdicts:
        print(f"[{c.label()}] {report.MODE_NAMES[c.mode]}: {c.name}: {c.detail}")

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    png = os.path.join(args.out, f"demo-{stamp}.png")
    try:
        report.plot(runs, labels, modes, png, f"{layout.describe()}, {network}")
    except ImportError:
        png = "skipped, matplotlib is not installed (pip install matplotlib)"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"demo-{stamp}.json"), "w") as f:
        json.dump({"command": shlex.join(sys.argv), "network": network, "world_size": layout.world_size,
                   "hosts": layout.hosts, "ranks_per_host": layout.ranks_per_host,
                   "host_sizes": [layout.size_of(h) for h in range(layout.hosts)], "runs": runs,
                   "checks": [c.__dict__ for c in verdicts]}, f)
    print(f"\nplot: {png}")
    print(f"total {time.monotonic() - started:.0f} s")
    return 0 if all(c.passed for c in verdicts if not c.goal) else 1


def _describe_dp_hooks(args: argparse.Namespace) -> None:
    common = (f"window={EDGC_WINDOW}, alpha={EDGC_ALPHA:g}, warmup_fraction={EDGC_WARMUP_FRACTION:g}, "
              f"total_iterations={args.steps}")
    print(f"zipccl PowerSGD rank r (r in {', '.join(map(str, args.psgd_ranks))}): zipccl.hooks.EDGCState(r_min=r, "
          f"r_max=r, {common}) with edgc_hook, NOT torch's powerSGD_hook: that one fails on CPU tensors at its first "
          "compressed step (its callbacks issue all-reduces, so ranks disagree on their order), see demo/cli.py")
    print(f"{LABELS['zipccl-edgc']}: zipccl.hooks.EDGCState(r_min={EDGC_R_MIN}, r_max=None (from zipccl.link_model and "
          f"the hook's measured compression time), {common}) with edgc_hook")
    print("both compress from the first window's end after warm-up where the window's entropy is below the "
          "first window's; plain: DDP's own all-reduce")


def _print_dp_hook_results(runs: dict[str, dict[str, dict[str, Any]]], netns: bool) -> None:
    """--dp-hook: the three runs side by side, the ranks over time, and
    EDGC's windows and the link its r_max came from."""
    print(report.dp_hook_table(runs, LABELS))
    print("step ms: median over steps 3.. of the mean over ranks; speed: plain zipccl's step time / this one's")
    if netns:
        print("wire MB/step: what all hosts' NICs sent per step (mean over all steps), headers included")
    else:
        print("wire MB/step*: zipccl's own payload count (loopback: no NICs)")
    print("final loss: mean of the last 10 steps")
    for key in [k for k in runs if k.startswith(FIXED_RUN)] + ["zipccl-edgc"]:
        s = runs.get(key, {}).get("ddp")
        if s and s.get("hook_ranks") is not None:
            print(f"{LABELS[key]} rank by step: {report.rank_runs(s['hook_ranks'])}")
    edgc = runs.get("zipccl-edgc", {}).get("ddp") or {}
    if edgc.get("link"):
        from ..hooks.costs import timing_rank

        link = edgc["link"]
        print(f"EDGC r_max = {link['r_max']}: link {link['bytes_per_s'] * 8 / 1e6:.0f} Mbit/s, "
              f"latency {link['latency_s'] * 1e6:.0f} us (zipccl.link_model), compression "
              f"{link['compress_s_fixed'] * 1e3:.2f} ms + {link['compress_s_per_rank'] * 1e3:.3f} ms per unit of "
              f"rank (fitted to its times at ranks {EDGC_R_MIN} and {timing_rank(EDGC_R_MIN)})")
        if "step_overhead_s" in link:
            print(f"EDGC measured steps: a compressed step cost {link['step_overhead_s'] * 1e3:+.1f} ms beyond that "
                  f"model (last window's calibration), so r_max = {link['r_max_measured']}"
                  + (" < r_min: compression stopped" if link["r_max_measured"] < EDGC_R_MIN else ""))
    elif edgc:
        print("EDGC r_max: not set (no window ended with a timed compression)")
    r_max = (edgc.get("link") or {}).get("r_max")
    for w in edgc.get("windows", []):
        rank = "uncompressed" if w["rank"] is None else f"rank {w['rank']}"
        moved = f" (r_max now {w['r_max']}, from the measured steps)" if w.get("r_max") != r_max else ""
        r_max = w.get("r_max")
        print(f"  EDGC window ending at step {w['iteration']:>4}: entropy {w['entropy']:.4f} nats, "
              f"Eq. 15 target {w['target']:.1f} -> {rank}{moved}")


def _print_results(runs: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str], modes: list[str],
                   args: argparse.Namespace, netns: bool) -> None:
    """The lossless and --lossy demos' table and notes."""
    print(report.table(runs, labels, modes))
    print("step ms: median over steps 3.. of the mean over ranks; vs gloo: gloo's step time / this one's")
    print("(†: a separate launch, so its time is not side by side with gloo's and is noisier)")
    if netns:
        print("wire MB/step: what all hosts' NICs sent per step, headers included")
    else:
        print("wire MB/step*: zipccl's own payload count (loopback: no NICs); gloo: n/a")
    print("ratio: bytes with compression off / bytes of this run")
    for mode in modes:
        choices = runs.get("zipccl", {}).get(mode, {}).get("zipccl_choices")
        if choices:
            text = "; ".join(f"{op} " + ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))
                             for op, c in sorted(choices.items()))
            print(f"zipccl's choices ({report.MODE_NAMES[mode]}): {text}")
        lossy_run = runs.get(LOSSY_RUN.get(args.lossy or ""), {}).get(mode, {})
        if lossy_run.get("lossy_calls") is not None:
            calls = lossy_run.get("calls") or {}
            text = "; ".join(f"{op} " + ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))
                             + (f" of {calls[op]}" if op in calls else "")
                             for op, c in sorted(lossy_run["lossy_calls"].items())) or "none"
            exact = [f"{op} x{n}" for op, n in sorted(calls.items()) if op not in lossy_run["lossy_calls"]]
            print(f"{LABELS[LOSSY_RUN[args.lossy]]} lossy calls ({report.MODE_NAMES[mode]}): {text}"
                  + (f"; exact: {', '.join(exact)}" if exact else ""))

