"""One rank of the demo's training (started by the harness; configuration as
JSON in argv[1]).

Each backend under test gets its own group and its own copy of the model in
the same process; the copies take their steps in alternation (step k with
one backend, step k with the other, then step k+1 in the other order). So
gloo and zipccl run on the same links in the same seconds, and whatever
else the machine is doing slows both alike; a sequential pair of runs on a
shared 2-core machine would mostly measure the neighbours. A gloo default
group carries the loss and time reports, never a measured byte.

A mode is how the model is spread over the ranks: DDP, FSDP2 (hpZ: FSDP2
resharding to the host's ranks after forward) or TP (torch's tensor
parallelism over the whole world, all ranks training on one batch).

A DDP run may carry a communication hook (``--dp-hook edgc``): zipccl.hooks'
EDGC, at a fixed rank (r_min = r_max) or entropy-driven; its rank at each
step is reported with the losses.

Everything that could differ between the copies other than the backend is
pinned: one compute thread, the same seed for the weights, batches that are
a function of (seed, step, rank) only. So two backends' loss curves differ
exactly by how their reductions round, and a lossless codec must not change
them at all.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from .corpus import batch, load_corpus
from .model import GPT, GPTConfig, tensor_parallel

EVENT_PREFIX = "@zipccl-demo "

# What travels on the wire, per --comm-dtype: (DDP gradients, FSDP2
# parameters, FSDP2 gradients). "mixed" is the usual large-model recipe
# (TorchTitan's FSDP2 default: bf16 parameters, fp32 gradient reduction).
COMM_DTYPES = {
    "mixed": (torch.float32, torch.bfloat16, torch.float32),
    "bfloat16": (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    "float32": (torch.float32, torch.float32, torch.float32),
}


def emit(kind: str, **fields: Any) -> None:
    print(EVENT_PREFIX + json.dumps({"event": kind, **fields}), flush=True)


def _nic_tx() -> int:
    """Bytes sent by this rank's host's interface, read by the host's local
    rank 0 only (its ranks share it); 0 elsewhere or without one."""
    ifname = os.environ.get("ZIPCCL_BENCH_NIC")
    if not ifname or os.environ.get("LOCAL_RANK", "0") != "0":
        return 0
    try:
        with open(f"/sys/class/net/{ifname}/statistics/tx_bytes") as f:
            return int(f.read())
    except OSError:
        return 0


def _zipccl_wire(group) -> int:
    """Payload bytes zipccl has sent on group so far."""
    import zipccl

    return sum(int(st.get("wire_bytes", 0)) for st in zipccl.stats(group).get("ops", {}).values())


def _zipccl_choices(group) -> dict[str, dict[str, int]]:
    """How often zipccl's switcher took each choice, per op kind, on group
    so far."""
    import zipccl

    return {op: dict(st.get("choices") or {}) for op, st in zipccl.stats(group).get("ops", {}).items()
            if st.get("choices")}


def _lossy_calls(group) -> dict[str, dict[str, int]]:
    """The calls group's lossy policy coded, per op kind and mode."""
    import zipccl

    return {op: dict(st["lossy_calls"]) for op, st in zipccl.stats(group).get("ops", {}).items()
            if st.get("lossy_calls")}


def _calls(group) -> dict[str, int]:
    """All calls on group, per op kind: what the lossy ones are out of."""
    import zipccl

    return {op: int(st.get("count", 0)) for op, st in zipccl.stats(group).get("ops", {}).items()}


def _choices_since(group, before: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for op, counts in _zipccl_choices(group).items():
        delta = {k: v - before.get(op, {}).get(k, 0) for k, v in counts.items()}
        delta = {k: v for k, v in delta.items() if v}
        if delta:
            out[op] = delta
    return out


def _hook_state(net: torch.nn.Module, spec: dict[str, Any], group, steps: int) -> Any:
    """Registers zipccl.hooks' EDGC hook as spec describes on net (r_max
    None: from zipccl's measured link); returns its state."""
    import zipccl.hooks

    state = zipccl.hooks.EDGCState(group, r_min=spec["r_min"], r_max=spec["r_max"], window=spec["window"],
                                   alpha=spec["alpha"], warmup_fraction=spec["warmup_fraction"],
                                   total_iterations=steps)
    net.register_comm_hook(state, zipccl.hooks.edgc_hook)
    return state


class Trainer:
    """One model copy, wrapped for one mode, talking on one group."""

    def __init__(self, key: str, mode: str, backend: str, group, cfg: dict, corpus: torch.Tensor,
                 rank: int) -> None:
        self.key, self.mode, self.backend, self.group = key, mode, backend, group
        self.cfg, self.corpus, self.rank = cfg, corpus, rank
        self.hook_state: Any = None
        # The whole world is one TP group, and a TP group trains on one
        # batch: every rank draws rank 0's.
        self.data_rank = 0 if mode == "tp" else rank
        self.model_cfg = GPTConfig(**cfg["model"])
        torch.manual_seed(cfg["seed"])
        self.model = GPT(self.model_cfg)
        self.net = self._wrap(self.model)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.0)
        # per step: this host's NIC bytes (local rank 0), zipccl's payload,
        # the hook's rank (None: uncompressed)
        self.nic: list[int] = []
        self.wire: list[int] = []
        self.hook_ranks: list[int | None] = []
        # The group outlives this mode's training (DDP, then FSDP2 on it):
        # count the switcher's choices from here on.
        self.choices0 = _zipccl_choices(group) if backend == "zipccl" else {}

    def _wrap(self, model: GPT) -> torch.nn.Module:
        grad_dtype, param_dtype, reduce_dtype = COMM_DTYPES[self.cfg["comm_dtype"]]
        if self.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            net = DDP(model, process_group=self.group)
            spec = self.cfg.get("dp_hooks", {}).get(self.key)
            if spec:
                if grad_dtype != torch.float32:
                    raise ValueError("the DDP hook runs take float32 gradients (--comm-dtype mixed or float32)")
                self.hook_state = _hook_state(net, spec, self.group, self.cfg["steps"])
            elif grad_dtype == torch.bfloat16:
                from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

                net.register_comm_hook(self.group, bf16_compress_hook)
            return net
        if self.mode in ("fsdp", "hpz"):
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mesh = DeviceMesh.from_group(self.group, "cpu")
            policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
            # hpZ: after forward, keep the parameters sharded over the
            # host's ranks only, so backward all-gathers inside the host
            # (ranks are host-major, as FSDP2's rows of that size assume)
            reshard = int(os.environ["LOCAL_WORLD_SIZE"]) if self.mode == "hpz" else True
            for block in model.blocks:
                fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
            fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
            return model
        if self.mode == "tp":
            from torch.distributed.device_mesh import DeviceMesh

            # Meshes over the same ranks compare equal whatever their group,
            # so DTensor's caches would hand one run's redistributions the
            # first run's group: a dimension name per group keeps them apart.
            mesh = DeviceMesh.from_group(self.group, "cpu", mesh_dim_names=(f"tp{self.group.group_name}",))
            return tensor_parallel(model, mesh)
        raise ValueError(f"unknown mode {self.mode!r}")

    def step(self, step: int) -> tuple[float, float]:
        """One optimizer step; returns (this rank's loss, seconds)."""
        steps, peak = self.cfg["steps"], self.cfg["lr"]
        warm = max(1, steps // 10)
        lr = peak * (step + 1) / warm if step < warm else \
            peak * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm))))
        for group in self.opt.param_groups:
            group["lr"] = lr
        x, y = batch(self.corpus, step, self.data_rank, self.cfg["batch"], self.model_cfg.seq_len, self.cfg["seed"])
        nic0 = _nic_tx()
        if os.environ.get("ZIPCCL_BENCH_NIC"):  # set for every rank alike
            dist.barrier()  # read before any rank of the host sends
        wire0 = _zipccl_wire(self.group) if self.backend == "zipccl" else 0
        self.hook_ranks.append(self.hook_state.rank if self.hook_state is not None else None)
        t0 = time.perf_counter()
        loss = self.net(x, y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - t0
        if os.environ.get("ZIPCCL_BENCH_NIC"):
            dist.barrier()  # every rank of the host done (the control group's bytes are few)
        self.nic.append(_nic_tx() - nic0)
        self.wire.append(_zipccl_wire(self.group) - wire0 if self.backend == "zipccl" else 0)
        return float(loss.detach()), elapsed


def _hook_summary(trainer: Trainer, wire_steps: list[float], nic_steps: list[float]) -> dict[str, Any]:
    """A hook run's per-step ranks and bytes, its windows and the link its
    r_max came from (None: r_max given); nothing for a run without a hook."""
    state = trainer.hook_state
    if state is None:
        return {}
    return {"hook_ranks": trainer.hook_ranks, "wire_steps": wire_steps,
            "nic_steps": nic_steps if os.environ.get("ZIPCCL_BENCH_NIC") else None,
            "windows": [dataclasses.asdict(w) for w in state.windows], "link": state.link,
            "r_max": state.controller.r_max}


def train_mode(mode: str, runs: dict[str, str], groups: dict, cfg: dict, corpus: torch.Tensor,
               rank: int, n: int) -> None:
    trainers = {key: Trainer(key, mode, backend, groups[key], cfg, corpus, rank) for key, backend in runs.items()}
    keys = list(trainers)
    history: dict[str, dict[str, list[float]]] = {k: {"losses": [], "times": []} for k in keys}
    for step in range(cfg["steps"]):
        order = keys if step % 2 == 0 else keys[::-1]
        local = {}
        for key in order:
            dist.barrier()  # on the control group: both copies start their step together
            local[key] = trainers[key].step(step)
        # Mean loss and step time over ranks. float64 sums of float32 values
        # are exact, so the reported loss does not depend on this group.
        report = torch.tensor([v for k in keys for v in local[k]], dtype=torch.float64)
        dist.all_reduce(report)
        report /= n
        for i, key in enumerate(keys):
            loss, secs = report[2 * i].item(), report[2 * i + 1].item()
            history[key]["losses"].append(loss)
            history[key]["times"].append(secs)
            if rank == 0:
                emit("step", mode=mode, run=key, step=step, loss=loss, time_s=secs)
    steps = cfg["steps"]
    skip = min(3, steps - 1)  # the first steps pay for lazy setup
    for key in keys:
        # per step, summed over ranks: zipccl's payload, the NICs' bytes
        counts = torch.tensor([trainers[key].wire, trainers[key].nic], dtype=torch.float64)
        dist.all_reduce(counts)
        wire_steps, nic_steps = counts.tolist()
        choices = _choices_since(groups[key], trainers[key].choices0) if runs[key] == "zipccl" else None
        lossy = _lossy_calls(groups[key]) if key in cfg.get("lossy", {}) else None
        calls = _calls(groups[key]) if key in cfg.get("lossy", {}) else None
        if rank == 0:
            emit("summary", mode=mode, run=key, steps=steps, params=trainers[key].model.num_params(),
                 losses=history[key]["losses"], times=history[key]["times"],
                 median_step_s=statistics.median(history[key]["times"][skip:]),
                 zipccl_wire_per_step=sum(wire_steps) / steps if runs[key] == "zipccl" else None,
                 nic_per_step=sum(nic_steps) / steps if os.environ.get("ZIPCCL_BENCH_NIC") else None,
                 zipccl_choices=choices, lossy_calls=lossy, calls=calls,
                 **_hook_summary(trainers[key], wire_steps, nic_steps))


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    runs: dict[str, str] = cfg["runs"]  # run key -> backend
    if "zipccl" in runs.values():
        import zipccl  # noqa: F401  (registers the backend)
    timeout = datetime.timedelta(seconds=cfg["timeout_s"])
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timeout)
    groups = {key: dist.new_group(backend=backend, timeout=timeout) for key, backend in runs.items()}
    for key, policy in cfg.get("lossy", {}).items():  # --lossy: that run's group codes lossily
        import zipccl

        zipccl.set_lossy(groups[key], **policy)
    corpus, where = load_corpus(cfg["corpus_bytes"])
    if rank == 0:
        emit("start", corpus=where, torch=torch.__version__)
    for mode in cfg["modes"]:
        train_mode(mode, runs, groups, cfg, corpus, rank, n)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
