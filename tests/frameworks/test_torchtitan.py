"""TorchTitan (pinned in requirements-torchtitan.txt) trains its llama3 debug
model (6M parameters) on CPU over zipccl, against gloo on identical data, 2
ranks: FSDP2, and tensor parallelism (TP) of 2 with sequence parallelism.

Each run is TorchTitan's own ``torchtitan.train.main`` in one process per rank
(harness.launch), started the way the README tells a TorchTitan user to: the
README's TorchTitan code block is read from README.md and run before
``main()``, so TorchTitan's ``init_distributed`` finds the zipccl group and
keeps it. The gloo reference creates its group the same way, with "gloo".

The launcher patches, for CPU and never in zipccl:
- the device: TorchTitan picks it at import (``_get_available_device_type()
  or "cuda"``, cuda on a machine without a GPU); here cpu, with a stand-in of
  torch.cpu that has the CUDA memory statistics TorchTitan's metrics read and
  a ``current_device()`` of 0 (torch.cpu's is "cpu", which
  ``barrier(device_ids=...)`` cannot use);
- FlexAttention, which has no backward on CPU: TorchTitan's own override hook
  (``--override.imports``) swaps it for SDPA, causal over each packed sequence
  rather than per document; the same on both backends;
- for the gloo run only: TorchTitan sets FSDP2's gradient divide factor (1.0),
  so FSDP2 reduce-scatters with PREMUL_SUM(1.0), which gloo refuses; the gloo
  run forces FSDP2's SUM fallback. Scaling by 1.0 is exact, so both sum the
  same values.

The losses must agree bitwise, and do: with 2 ranks each reduced element is a
single IEEE addition a + b, which is commutative, so every algorithm and order
gives the same bits; gathers and broadcasts are copies; zipccl's codecs are
lossless (ZIPCCL_COMPRESS=always makes it code the traffic, which "auto" never
does on one host); and each rank's CPU kernels run deterministically on one
thread. (At more ranks sums could differ by fp reordering.)

TorchTitan ships no tokenizer and no data set: a fixture trains a BPE tokenizer
(``tokenizers``) on the demo's offline corpus (the Python standard library's
source) and writes that corpus as JSON lines for TorchTitan's c4_test loader.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from harness import TESTS_DIR, launch, result_lines

pytest.importorskip("torchtitan")
pytest.importorskip("tokenizers")

STEPS = 4

# One rank: TT_ARGS (JSON) is TorchTitan's argv, TT_BACKEND the backend,
# TT_INIT the code that creates the default group. Prints "RESULT {json}".
LAUNCHER = r"""
import json, os, sys, types
import torch

# --- device cpu, before any torchtitan module imports it from tools.utils ---
import torchtitan.tools.utils as tt_utils

def _nothing(*a, **k):
    return None

cpu = types.SimpleNamespace(**{n: getattr(torch.cpu, n) for n in dir(torch.cpu) if not n.startswith("_")})
cpu.current_device = lambda: 0
cpu.set_device = _nothing
cpu.get_device_name = lambda *a: "cpu"
cpu.get_device_properties = lambda *a: types.SimpleNamespace(total_memory=1 << 40, name="cpu")
cpu.memory_stats = lambda *a: {}
cpu.reset_peak_memory_stats = _nothing
cpu.empty_cache = _nothing
tt_utils.device_type, tt_utils.device_module = "cpu", cpu
tt_utils.get_device_info = lambda: ("cpu", cpu)

backend = os.environ["TT_BACKEND"]

import torch.distributed as dist

# FSDP2's reduce-scatters (dist.reduce_scatter_single): how many, which op
rs_ops, rs_calls = set(), [0]
_rs = dist.reduce_scatter_single
def _recording_rs(*a, **k):
    op = k.get("op")
    rs_ops.add(str(getattr(op, "op", op)))
    rs_calls[0] += 1
    return _rs(*a, **k)
dist.reduce_scatter_single = _recording_rs

if backend == "gloo":
    # gloo refuses PREMUL_SUM: FSDP2's SUM fallback, for the reference only
    from torch.distributed.fsdp import FSDPModule
    _set_factor = FSDPModule.set_gradient_divide_factor
    def _sum_fallback(self, factor):
        _set_factor(self, factor)
        self.set_force_sum_reduction_for_comms(True)
    FSDPModule.set_gradient_divide_factor = _sum_fallback

from torchtitan.components.metrics import MetricsProcessor
from torchtitan.trainer import Trainer
import torchtitan.train

losses = []
_log = MetricsProcessor.log
def _record(self, step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=None):
    losses.append([step, float(global_avg_loss), float(grad_norm)])
    return _log(self, step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra_metrics)
MetricsProcessor.log = _record

# zipccl's stats, read after training (main() destroys the groups after)
out = {}
_train = Trainer.train
def _train_and_read_stats(self):
    _train(self)
    groups = {"default": None}
    for name, mesh in self.parallel_dims.get_all_one_dimensional_meshes().items():
        groups[name] = mesh.get_group()
    out["backends"] = {name: dist.get_backend(g) for name, g in groups.items()}
    if backend == "zipccl":
        import zipccl
        out["stats"] = {name: zipccl.stats(g) for name, g in groups.items()}
    out["n_layers"] = len(self.model_parts[0].layers)
    out["n_params"] = sum(p.numel() for m in self.model_parts for p in m.parameters())
Trainer.train = _train_and_read_stats

sys.argv = ["torchtitan.train"] + json.loads(os.environ["TT_ARGS"])
exec(os.environ["TT_INIT"])  # the README's lines (zipccl), or gloo's
torchtitan.train.main()
print("RESULT " + json.dumps({"losses": losses, "rs_ops": sorted(rs_ops), "rs_calls": rs_calls[0], **out}), flush=True)
sys.stderr.flush()
os._exit(0)  # skips the interpreter's teardown (seconds with torch loaded)
"""

# Through TorchTitan's --override.imports (module.function): FlexAttention,
# which has no backward on CPU, becomes SDPA. A module in the assets dir.
SDPA_OVERRIDE = r'''
from torchtitan.config.override import override
from torchtitan.models.common.attention import FlexAttention, ScaledDotProductAttention


@override(target=FlexAttention.Config, description="SDPA on CPU (FlexAttention has no CPU backward)")
def sdpa_on_cpu(cfg):
    return ScaledDotProductAttention.Config()
'''


def readme_lines() -> str:
    """The README's TorchTitan code block, which the zipccl runs execute."""
    with open(os.path.join(os.path.dirname(TESTS_DIR), "README.md")) as f:
        m = re.search(r"\*\*TorchTitan\*\*.*?```python\n(.*?)```", f.read(), re.S)
    assert m, "README.md has no TorchTitan code block"
    return m.group(1)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A BPE tokenizer trained on the demo's corpus, that corpus as JSON
    lines, and the SDPA override module."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from zipccl.demo.corpus import load_corpus

    root = tmp_path_factory.mktemp("torchtitan")
    blob, _ = load_corpus(max_bytes=1 << 20)
    text = bytes(blob.numpy()).decode("utf-8", errors="replace")
    docs = [d.strip() for d in text.split("\n\n") if len(d.strip()) > 40]
    assert len(docs) > 2000, len(docs)  # a few thousand documents
    (root / "data").mkdir()
    with open(root / "data" / "train.json", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")

    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # at most the debug model's vocabulary (2048)
    tok.train_from_iterator(
        docs,
        trainer=trainers.BpeTrainer(
            vocab_size=2048, special_tokens=[bos, eos], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    assert 1024 < tok.get_vocab_size() <= 2048
    (root / "tokenizer").mkdir()
    tok.save(str(root / "tokenizer" / "tokenizer.json"))
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({"bos_token": bos, "eos_token": eos}))

    (root / "tt_cpu_overrides.py").write_text(SDPA_OVERRIDE)
    return root


# The other way to get zipccl: TorchTitan's init_distributed creates the group
# itself, with the backend default_device_backend_map names for its device.
MAP_INIT = 'import torch.distributed as dist, zipccl\ndist.Backend.default_device_backend_map["cpu"] = "zipccl"\n'
GLOO_INIT = 'import torch.distributed as dist\ndist.init_process_group("gloo")\n'


def run(assets, backend: str, name: str, parallelism: list[str], init: str | None = None) -> list[dict]:
    """Trains on 2 ranks; init creates the group (default: the README's lines
    for zipccl)."""
    args = [
        "--module", "llama3", "--config", "llama3_debugmodel",
        "--hf_assets_path", str(assets / "tokenizer"),
        "--dataloader.dataset_path", str(assets / "data"),
        "--dump_folder", str(assets / f"out-{name}-{backend}"),
        "--training.steps", str(STEPS),
        "--training.local_batch_size", "2",
        "--training.seq_len", "256",
        "--training.disable_cuda_graphs",
        "--validator.no-enable",
        "--debug.seed", "42",  # the same initial weights in both runs
        "--override.imports", "tt_cpu_overrides.sdpa_on_cpu",
    ] + parallelism
    if init is None:
        init = readme_lines() if backend == "zipccl" else GLOO_INIT
    env = {
        "TT_BACKEND": backend,
        "TT_ARGS": json.dumps(args),
        "TT_INIT": init,
        "PYTHONPATH": os.pathsep.join([str(assets), TESTS_DIR]),
        "HF_HOME": str(assets / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "LOCAL_WORLD_SIZE": "2",
        # code the payloads: "auto" never codes on one host, and the codecs
        # must be lossless on TorchTitan's traffic too
        "ZIPCCL_COMPRESS": "always",
    }
    res = launch(LAUNCHER, 2, env=env, rank_env=lambda r: {"LOCAL_RANK": str(r)}, timeout=300)
    for r in res:
        assert r.returncode == 0, f"{name} {backend} rank {r.rank} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-8000:]}"
    out = [json.loads(x) for x in result_lines(res)]
    for o in out:
        assert set(o["backends"].values()) == {backend}, o["backends"]  # every group, TorchTitan's meshes too
        assert [s for s, _, _ in o["losses"]] == list(range(1, STEPS + 1)), o["losses"]
    assert out[0]["losses"] == out[1]["losses"]  # global metrics: the same on every rank
    return out


def check_losses(z: list[dict], g: list[dict]) -> None:
    zl, gl = z[0]["losses"], g[0]["losses"]
    # bitwise: loss and grad norm, every step (float.hex to show the bits)
    assert [[s, float.hex(a), float.hex(b)] for s, a, b in zl] == [[s, float.hex(a), float.hex(b)] for s, a, b in gl]
    assert zl[-1][1] < zl[0][1], f"did not train: {zl}"


def op(stats: dict, name: str) -> dict:
    o = stats["ops"].get(name)
    assert o and o["count"] > 0 and o["errors"] == 0, f"zipccl served no {name} (or failed): {stats['ops']}"
    return o


def coded(o: dict) -> bool:
    return sum(n for k, n in o["choices"].items() if k != "raw") > 0 and o["ratio"] > 1


def test_fsdp2(assets):
    """FSDP2 over 2 ranks: bf16 all-gathers and fp32 PREMUL_SUM reduce-scatters.
    zipccl both ways: the README's group, and TorchTitan's own init through
    default_device_backend_map."""
    par = ["--parallelism.data_parallel_shard_degree", "2"]
    g = run(assets, "gloo", "fsdp2", par)
    z = run(assets, "zipccl", "fsdp2", par)
    zm = run(assets, "zipccl", "fsdp2-map", par, init=MAP_INIT)
    check_losses(z, g)
    check_losses(zm, g)
    for r in z + zm:
        # TorchTitan's divide factor makes FSDP2 ask for PREMUL_SUM; zipccl takes it
        assert r["rs_ops"] == ["RedOpType.PREMUL_SUM"], r["rs_ops"]
        st = r["stats"]["dp_shard"]
        rs, ag = op(st, "reduce_scatter"), op(st, "all_gather")
        # every FSDP2 reduce-scatter, and no other, was zipccl's; each step
        # reduces every fp32 gradient element once (no padding: dims are even)
        assert rs["count"] == r["rs_calls"] > 0
        assert rs["raw_bytes"] == STEPS * 4 * r["n_params"]
        assert ag["count"] >= rs["count"]  # each unit gathered before its gradients are reduced
        assert coded(rs) and coded(ag), (rs, ag)
        op(st, "all_reduce")  # token counts, loss, grad norm
    assert g[0]["rs_ops"] == ["RedOpType.SUM"]  # the reference's fallback


def test_tp2(assets):
    """TP = 2 with sequence parallelism (TorchTitan's default): all-gathers and
    reduce-scatters of activations, all-reduces, on the TP group."""
    par = ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"]
    z = run(assets, "zipccl", "tp2", par)
    g = run(assets, "gloo", "tp2", par)
    check_losses(z, g)
    for r in z:
        assert r["rs_calls"] == 0  # no FSDP2 reduce-scatter: the TP group carries it all
        st = r["stats"]["tp"]
        # per layer and step, sequence parallelism gathers the input of
        # attention and of the MLP and reduce-scatters their outputs, and the
        # backward does the converse: at least 4 of each per layer and step
        least = 4 * r["n_layers"] * STEPS
        ag, rs, ar = op(st, "all_gather"), op(st, "reduce_scatter"), op(st, "all_reduce")
        assert ag["count"] >= least and rs["count"] >= least, (ag["count"], rs["count"], least)
        assert ar["count"] >= STEPS  # at least the grad norm, each step
        # TP's reduce-scatters (256 KiB) stay below zipccl's two-shot size,
        # where reductions are never coded; the all-gathers are coded
        assert coded(ag), ag
