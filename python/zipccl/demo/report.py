"""The demo's verdicts, table and plot, from the runs' summaries.

A run is one backend configuration ("gloo", "zipccl", "zipccl, compression
off") trained in one mode ("ddp", "fsdp", "hpz" or "tp"); its summary holds the per-step
losses and times and the bytes it sent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MODE_NAMES = {"ddp": "DDP", "fsdp": "FSDP2", "hpz": "hpZ", "tp": "TP"}

# The dtype gradients (TP: activations too) are reduced in, per mode and
# --comm-dtype; TP trains in float32 whatever the option says.
REDUCE_DTYPE = {
    "mixed": {"ddp": "float32", "fsdp": "float32", "hpz": "float32", "tp": "float32"},
    "float32": {"ddp": "float32", "fsdp": "float32", "hpz": "float32", "tp": "float32"},
    "bfloat16": {"ddp": "bfloat16", "fsdp": "bfloat16", "hpz": "bfloat16"},
}
# Modes whose forward pass reduces (TP's reduce-scatters of activations):
# their first loss may already differ between backends by rounding.
FORWARD_REDUCES = {"tp"}
_EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7}


def gloo_rtol(reduce_dtype: str) -> float:
    """How far gloo's loss may drift from zipccl's. Both sum the same
    gradients in a different order, so every step's update differs by
    rounding in the reduction dtype, and training compounds it. 1e-3 for
    float32 reductions is orders above that and below any real bug (a wrong
    gradient shows at the first step); bfloat16 reductions round 65536x
    coarser, so the drift allowed is 8 bfloat16 ulps."""
    return max(1e-3, 8 * _EPS[reduce_dtype])


@dataclass
class Check:
    mode: str
    name: str
    passed: bool
    detail: str
    goal: bool = False  # a speed goal: reported, never a failure of the run

    def label(self) -> str:
        if self.goal:
            return "GOAL MET" if self.passed else "GOAL MISSED"
        return "PASS" if self.passed else "FAIL"


def _wire(summary: dict[str, Any]) -> tuple[float | None, str]:
    """Bytes per step on the wire: what the NICs counted (all ranks,
    headers included) when ranks have their own links, else zipccl's own
    payload count, else unknown."""
    if summary.get("nic_per_step"):
        return summary["nic_per_step"], "nic"
    if summary.get("zipccl_wire_per_step") is not None:
        return summary["zipccl_wire_per_step"], "zipccl"
    return None, ""


def checks(runs: dict[str, dict[str, dict[str, Any]]], modes: Sequence[str], comm_dtype: str) -> list[Check]:
    """For each mode: zipccl's loss curve is bit-identical to zipccl's with
    compression off, and within fp reordering (gloo_rtol) of gloo's, from
    an identical first loss where the forward pass has no reduction."""
    out = []
    for mode in modes:
        z = runs.get("zipccl", {}).get(mode)
        off = runs.get("zipccl-off", {}).get(mode)
        g = runs.get("gloo", {}).get(mode)
        if z and off:
            diffs = [i for i, (a, b) in enumerate(zip(z["losses"], off["losses"])) if a != b]
            same_len = len(z["losses"]) == len(off["losses"])
            if not diffs and same_len:
                out.append(Check(mode, "zipccl == zipccl compression off", True,
                                 f"all {len(z['losses'])} losses bit-identical"))
            else:
                first = diffs[0] if diffs else min(len(z["losses"]), len(off["losses"]))
                out.append(Check(mode, "zipccl == zipccl compression off", False,
                                 f"first differs at step {first}"))
        if z and g:
            rtol = gloo_rtol(REDUCE_DTYPE[comm_dtype][mode])
            rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(z["losses"], g["losses"])]
            worst = max(range(len(rel)), key=rel.__getitem__)
            first_same = z["losses"][0] == g["losses"][0]
            exact_start = mode not in FORWARD_REDUCES
            if z["losses"] == g["losses"]:
                detail = "bit-identical"
            else:
                start = f"step 0 {'identical' if first_same else 'DIFFERS'}; " if exact_start else ""
                detail = (f"{start}max relative loss difference {rel[worst]:.1e} at step {worst} (limit {rtol:.0e}, "
                          f"{REDUCE_DTYPE[comm_dtype][mode]} reductions)")
            out.append(Check(mode, "zipccl ~= gloo", rel[worst] <= rtol and (first_same or not exact_start),
                             detail))
    return out


ZERO_PP_LOSS_RTOL = 0.02  # ZeRO++ reports +2.07 % with all three parts
ZERO_PP_SPEEDUP = 1.8


def _final(losses: Sequence[float]) -> float:
    """The final loss: the mean of the last 10 steps (one step is noisy)."""
    tail = list(losses[-10:])
    return sum(tail) / len(tail)


def zero_pp_checks(runs: dict[str, dict[str, dict[str, Any]]], modes: Sequence[str]) -> list[Check]:
    """--lossy zero++: the ZeRO++ run's final loss within 2 % of lossless
    zipccl's, its lossy policy used, and the goal of a step 1.8x gloo's."""
    return _lossy_checks(runs, modes, "zipccl-zpp", "ZeRO++", ZERO_PP_LOSS_RTOL, ZERO_PP_SPEEDUP)


TP_FP8_LOSS_RTOL = 0.005
TP_FP8_SPEEDUP = 1.5


def tp_fp8_checks(runs: dict[str, dict[str, dict[str, Any]]], modes: Sequence[str]) -> list[Check]:
    """--lossy tp-fp8: the fp8 run codes the activations' all_gathers and
    reduce_scatters, its final loss is within 0.5 % of lossless zipccl's,
    and the goal of a step 1.5x gloo's."""
    return _lossy_checks(runs, modes, "zipccl-fp8", "fp8", TP_FP8_LOSS_RTOL, TP_FP8_SPEEDUP)


def _lossy_checks(runs: dict[str, dict[str, dict[str, Any]]], modes: Sequence[str], key: str, name: str,
                  loss_rtol: float, speedup: float) -> list[Check]:
    """A lossy run (key) codes all_gather and reduce_scatter, ends within
    loss_rtol of lossless zipccl's loss, and (the goal) steps speedup
    times faster than gloo."""
    out = []
    for mode in modes:
        lossy, z, g = (runs.get(k, {}).get(mode) for k in (key, "zipccl", "gloo"))
        if not lossy:
            continue
        coded = {op: sum(c.values()) for op, c in (lossy.get("lossy_calls") or {}).items()}
        out.append(Check(mode, f"{name} codes all_gather and reduce_scatter",
                         coded.get("all_gather", 0) > 0 and coded.get("reduce_scatter", 0) > 0,
                         ", ".join(f"{op} x{k}" for op, k in sorted(coded.items())) or "no lossy calls"))
        if z:
            a, b = _final(lossy["losses"]), _final(z["losses"])
            rel = a / b - 1
            out.append(Check(mode, f"{name} loss within {loss_rtol * 100:g} % of lossless", abs(rel) <= loss_rtol,
                             f"mean of the last 10 steps {a:.4f} vs {b:.4f} ({rel * 100:+.2f} %)"))
        if g:
            ratio = g["median_step_s"] / lossy["median_step_s"]
            out.append(Check(mode, f"{name} step >= {speedup}x gloo's", ratio >= speedup,
                             f"{ratio:.2f}x ({lossy['median_step_s'] * 1e3:.0f} vs {g['median_step_s'] * 1e3:.0f} ms)",
                             goal=True))
    return out


DP_HOOK_LOSS_RTOL = 0.01
DP_HOOK_SPEEDUP = 1.3


FIXED_RUN = "zipccl-fixed-"  # + the rank: --dp-hook's fixed-rank PowerSGD runs


def fixed_runs(runs: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """--dp-hook's fixed-rank PowerSGD runs (key FIXED_RUN + rank), by rank."""
    out = [(int(k[len(FIXED_RUN):]), s["ddp"]) for k, s in runs.items() if k.startswith(FIXED_RUN) and s.get("ddp")]
    return sorted(out, key=lambda x: x[0])


def bytes_and_loss(summary: dict[str, Any]) -> tuple[float | None, float]:
    """A run's wire bytes per step (None where not counted) and final loss,
    the two coordinates of --dp-hook's equal-bytes comparison."""
    return _wire(summary)[0], _final(summary["losses"])


def equal_bytes_loss(points: Sequence[tuple[float, float]], nbytes: float) -> float | None:
    """The fixed-rank runs' final loss at nbytes per step, interpolated
    linearly between the two runs (bytes, loss) that bracket it; None
    outside their range."""
    pts = sorted(points)
    for (b0, l0), (b1, l1) in zip(pts, pts[1:]):
        if b0 <= nbytes <= b1:
            return l0 if b1 == b0 else l0 + (l1 - l0) * (nbytes - b0) / (b1 - b0)
    if len(pts) == 1 and pts[0][0] == nbytes:
        return pts[0][1]
    return None


def dp_hook_checks(runs: dict[str, dict[str, dict[str, Any]]]) -> list[Check]:
    """--dp-hook edgc: EDGC's final loss within 1 % of plain zipccl DDP's;
    EDGC's final loss no worse than fixed-rank PowerSGD's at equal bytes:
    the fixed ranks' losses interpolated at EDGC's bytes per step, where two
    of them bracket it, or the cheapest one's where EDGC sent fewer bytes
    than any (else it is not shown, and fails); and the goal of a step 1.3x
    plain DDP's."""
    plain, edgc = (runs.get(k, {}).get("ddp") for k in ("zipccl", "zipccl-edgc"))
    fixed = fixed_runs(runs)
    out = []
    if not edgc:
        return out
    if plain:
        a, b = _final(edgc["losses"]), _final(plain["losses"])
        rel = a / b - 1
        out.append(Check("ddp", f"EDGC loss within {DP_HOOK_LOSS_RTOL * 100:g} % of plain DDP's",
                         abs(rel) <= DP_HOOK_LOSS_RTOL,
                         f"mean of the last 10 steps {a:.4f} vs {b:.4f} ({rel * 100:+.2f} %)"))
    if fixed:
        name = "EDGC loss <= PowerSGD's at equal bytes"
        eb, el = bytes_and_loss(edgc)
        points = [bytes_and_loss(s) for _, s in fixed]
        detail = f"EDGC {eb / 1e6:.2f} MB/step, loss {el:.4f}; " if eb else ""
        detail += "; ".join(f"rank {r} {b / 1e6:.2f} MB/step, loss {lo:.4f}" if b else f"rank {r} bytes not counted"
                            for (r, _), (b, lo) in zip(fixed, points))
        if eb is None or any(b is None for b, _ in points):
            out.append(Check("ddp", name, False, "bytes not counted"))
        elif (at := equal_bytes_loss(points, eb)) is not None:
            out.append(Check("ddp", name, el <= at, f"{detail}: PowerSGD at EDGC's bytes {at:.4f} (interpolated)"))
        elif eb < min(b for b, _ in points):
            cheapest = min(points)
            out.append(Check("ddp", name, el <= cheapest[1],
                             f"{detail}: EDGC sent fewer bytes than every fixed rank, compared with the cheapest"))
        else:
            out.append(Check("ddp", name, False, f"{detail}: EDGC sent more bytes than every fixed rank, so not "
                                                 "compared at equal bytes (add a higher --psgd-rank)"))
    if plain:
        ratio = plain["median_step_s"] / edgc["median_step_s"]
        out.append(Check("ddp", f"EDGC step >= {DP_HOOK_SPEEDUP}x plain DDP's", ratio >= DP_HOOK_SPEEDUP,
                         f"{ratio:.2f}x ({edgc['median_step_s'] * 1e3:.0f} vs {plain['median_step_s'] * 1e3:.0f} ms)",
                         goal=True))
    return out


def rank_runs(ranks: Sequence[int | None]) -> str:
    """Per-step ranks as runs: "steps 0-9 uncompressed, 10-99 rank 8"."""
    parts = []
    start = 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[start]:
            what = "uncompressed" if ranks[start] is None else f"rank {ranks[start]}"
            parts.append(f"{start}-{i - 1} {what}" if i - 1 > start else f"{start} {what}")
            start = i
    return "steps " + ", ".join(parts) if parts else "no steps"


def dp_hook_table(runs: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str]) -> str:
    """--dp-hook: step time and speed against plain zipccl DDP, bytes per
    step and their ratio to plain's, the hook's mean rank while compressing,
    and the final loss."""
    plain = runs.get("zipccl", {}).get("ddp")
    plain_wire, _ = _wire(plain or {})
    lines = [f"{'backend':<26} {'step ms':>8} {'speed':>6} {'wire MB/step':>13} {'bytes':>6} {'mean rank':>10} "
             f"{'final loss':>11}"]
    for key in ["zipccl"] + [f"{FIXED_RUN}{r}" for r, _ in fixed_runs(runs)] + ["zipccl-edgc"]:
        s = runs.get(key, {}).get("ddp")
        if not s:
            continue
        wire, source = _wire(s)
        speed = f"{plain['median_step_s'] / s['median_step_s']:.2f}x" if plain else "-"
        share = f"{wire / plain_wire:.2f}" if wire and plain_wire else "-"
        used = [r for r in s.get("hook_ranks") or [] if r is not None]
        rank = f"{sum(used) / len(used):.1f}" if used else "-"
        wire_text = f"{wire / 1e6:.2f}" + ("" if source == "nic" else "*") if wire else "n/a"
        lines.append(f"{labels[key]:<26} {s['median_step_s'] * 1e3:>8.1f} {speed:>6} {wire_text:>13} {share:>6} "
                     f"{rank:>10} {_final(s['losses']):>11.4f}")
    return "\n".join(lines)


def table(runs: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str], modes: Sequence[str]) -> str:
    lines = [f"{'mode':<6} {'backend':<26} {'step ms':>8} {'vs gloo':>8} {'wire MB/step':>13} "
             f"{'ratio':>6} {'final loss':>11}"]
    for mode in modes:
        off_wire, _ = _wire(runs.get("zipccl-off", {}).get(mode, {}))
        gloo = runs.get("gloo", {}).get(mode)
        for key, label in labels.items():
            s = runs.get(key, {}).get(mode)
            if not s:
                continue
            wire, source = _wire(s)
            ratio = "-"
            if key.startswith("zipccl") and wire and off_wire:
                ratio = f"{off_wire / wire:.2f}"
            speed = f"{gloo['median_step_s'] / s['median_step_s']:.2f}x" if gloo else "-"
            if key == "zipccl-off" and gloo:
                speed += "†"  # timed in a separate launch, not alternating with gloo
            wire_text = f"{wire / 1e6:.2f}" + ("" if source == "nic" else "*") if wire else "n/a"
            lines.append(f"{MODE_NAMES.get(mode, mode):<6} {label:<26} {s['median_step_s'] * 1e3:>8.1f} {speed:>8} "
                         f"{wire_text:>13} {ratio:>6} {_final(s['losses']):>11.4f}")
    return "\n".join(lines)


def plot(runs: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str], modes: Sequence[str],
         path: str, title: str) -> None:
    """Loss and step time against step, one column per mode; and the
    hooks' rank (--dp-hook), where a run has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"gloo": ("tab:blue", "-"), "zipccl": ("tab:red", "-"), "zipccl-off": ("tab:gray", "--"),
              "zipccl-zpp": ("tab:green", "-"), "zipccl-fp8": ("tab:green", "-"),
              "zipccl-edgc": ("tab:green", "-")}
    dashes = ["-", "--", ":", "-."] * 8
    styles.update({f"{FIXED_RUN}{r}": ("tab:purple", ls) for (r, _), ls in zip(fixed_runs(runs), dashes)})
    hooked = any(s.get("hook_ranks") is not None for run in runs.values() for s in run.values())
    rows = 3 if hooked else 2
    fig, axes = plt.subplots(rows, len(modes), figsize=(6 * len(modes), 3.5 * rows), squeeze=False)
    for col, mode in enumerate(modes):
        for key, label in labels.items():
            s = runs.get(key, {}).get(mode)
            if not s:
                continue
            color, ls = styles.get(key, (None, "-"))
            steps = range(len(s["losses"]))
            axes[0][col].plot(steps, s["losses"], color=color, linestyle=ls, label=label, linewidth=1.2)
            axes[1][col].plot(steps, [t * 1e3 for t in s["times"]], color=color, linestyle=ls, label=label,
                              linewidth=1.0)
            if hooked and s.get("hook_ranks") is not None:
                # uncompressed steps (None) leave a gap
                ranks = [float("nan") if r is None else r for r in s["hook_ranks"]]
                axes[2][col].step(steps, ranks, where="post", color=color, linestyle=ls, label=label)
        axes[0][col].set_title(f"{MODE_NAMES.get(mode, mode)}: training loss")
        axes[0][col].set_xlabel("step")
        axes[0][col].set_ylabel("loss (nats/byte)")
        axes[1][col].set_title(f"{MODE_NAMES.get(mode, mode)}: step time")
        axes[1][col].set_xlabel("step")
        axes[1][col].set_ylabel("ms")
        if hooked:
            axes[2][col].set_title(f"{MODE_NAMES.get(mode, mode)}: hook's rank (gap: uncompressed)")
            axes[2][col].set_xlabel("step")
            axes[2][col].set_ylabel("rank")
        for ax in (axes[r][col] for r in range(rows)):
            ax.grid(True, alpha=0.3)
            ax.legend()
    fig.suptitle(title, fontsize=9, wrap=True)  # one column (--lossy) is narrow for the layout line
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
