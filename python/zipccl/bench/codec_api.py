"""The codec through its Python API, side by side with ZipNN (issue 28).

``python -m zipccl bench codec`` runs this after the Go benchmark for the
data sets named by ``--api-data`` (default: the real weights and the demo
tensors). Each library is measured as a user calls it, bytes in and tensor
out:

* zipccl: ``zipccl.codec.compress(tensor, codec, threads=1)`` -> bytes and
  ``zipccl.codec.decompress(bytes, threads=1)`` -> a new tensor, for each
  ``--codecs`` entry except raw; and auto at its default threading
  (``threads=None``: one thread per CPU, encoding tensors of 2^23 elements
  or more and decoding those of 2^19 or more).
* ZipNN (when ``import zipnn`` works; ``--install-zipnn`` pip-installs
  ``zipnn==0.5.4``): ``ZipNN(input_format="torch", threads=N).compress(t)``
  -> bytes and ``ZipNN(input_format="torch", threads=N).decompress(bytes)``
  -> tensor, at each ``--zipnn-threads`` entry (0 = ZipNN's default,
  min(cpu_count, 16) threads).

ZipNN reorders the bytes of the tensor it compresses in place (0.5.4 does
for bfloat16 and float32), so every measured call, of either library, gets
a fresh clone of the input, made outside the timing. The rounds alternate
between the candidates (round 1 of each, then round 2 of each, ...), and the
best round is kept: wall clock, and process CPU time (all threads) for the
per-CPU-second rate. Every decode is checked bit for bit against the input.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

ZIPNN_PIP = "zipnn==0.5.4"


def zipnn_module() -> Any | None:
    """The zipnn module, or None when it is not installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module("zipnn")
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return None


def install_zipnn(log: Callable[[str], None]) -> bool:
    """pip-installs ZIPNN_PIP into this interpreter; True when importable."""
    if zipnn_module() is not None:
        return True
    log(f"bench codec: pip install {ZIPNN_PIP}")
    rc = subprocess.call([sys.executable, "-m", "pip", "install", "-q", ZIPNN_PIP])
    importlib.invalidate_caches()
    return rc == 0 and zipnn_module() is not None


def zipnn_version() -> str:
    try:
        from importlib.metadata import version

        return version("zipnn")
    except Exception:  # noqa: BLE001 - only a label
        return "?"


@dataclass
class Candidate:
    """One library configuration: encode(tensor) -> bytes, decode(bytes) -> tensor."""

    label: str  # e.g. "zipccl huff", "ZipNN"
    lib: str  # "zipccl" or "zipnn"
    threads: str  # "1", "2 (default)", ...
    encode: Callable[[torch.Tensor], Any]
    decode: Callable[[Any], torch.Tensor]
    used: str = ""  # the codec zipccl's auto chose


def candidates(codecs: list[str], zipnn_threads: list[int]) -> list[Candidate]:
    """The zipccl codecs (raw left out) and ZipNN at each thread count."""
    from .. import codec as zc

    import os

    out = []
    for name in codecs:
        if name == "raw":
            continue
        out.append(Candidate(f"zipccl {name}", "zipccl", "1",
                             (lambda t, n=name: zc.compress(t, n, threads=1)),
                             (lambda b: zc.decompress(b, threads=1))))
    if "auto" in codecs and (os.cpu_count() or 1) > 1:
        # its default: one thread per CPU, both ways
        out.append(Candidate("zipccl auto", "zipccl", f"default<={os.cpu_count()}",
                             (lambda t: zc.compress(t, "auto")), zc.decompress))
    zn = zipnn_module()
    if zn is not None:
        for th in zipnn_threads:
            def make(th: int = th) -> Any:
                # a new object per call, as a user decoding a file would have;
                # the header of the data configures it
                return zn.ZipNN(input_format="torch", threads=th)

            real = make().threads
            out.append(Candidate("ZipNN", "zipnn", f"{real}" + (" (default)" if th == 0 else ""),
                                 (lambda t, mk=make: mk().compress(t)),
                                 (lambda b, mk=make: mk().decompress(b))))
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    flat = t.reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat


def measure(tensor: torch.Tensor, cands: list[Candidate], rounds: int) -> list[dict[str, Any]]:
    """Rows (label, lib, threads, ratio, encoded_bytes, enc/dec wall GB/s and
    CPU GB/s, error) of every candidate on one tensor, best of ``rounds``
    alternating rounds."""
    from .. import codec as zc

    t = tensor.contiguous()
    nbytes = t.numel() * t.element_size()
    want = _bits(t)
    best: dict[int, dict[str, float]] = {i: {"enc": float("inf"), "dec": float("inf"),
                                             "enc_cpu": float("inf"), "dec_cpu": float("inf")}
                                         for i in range(len(cands))}
    size: dict[int, int] = {}
    errors: dict[int, str] = {}
    used: dict[int, str] = {}
    with warnings.catch_warnings():
        # ZipNN's decompress makes tensors of read-only numpy arrays
        warnings.simplefilter("ignore")
        for _ in range(max(1, rounds)):
            for i, c in enumerate(cands):
                if i in errors:
                    continue
                src = t.clone()  # fresh input each call: ZipNN reorders it in place
                try:
                    w0, c0 = time.perf_counter(), time.process_time()
                    blob = c.encode(src)
                    w1, c1 = time.perf_counter(), time.process_time()
                    del src
                    out = c.decode(blob)
                    w2, c2 = time.perf_counter(), time.process_time()
                except Exception as exc:  # noqa: BLE001 - one failing library must not end the run
                    errors[i] = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                if out.dtype != t.dtype or tuple(out.shape) != tuple(t.shape) or not torch.equal(_bits(out), want):
                    errors[i] = "decoded tensor differs from the input"
                    continue
                b = best[i]
                b["enc"], b["dec"] = min(b["enc"], w1 - w0), min(b["dec"], w2 - w1)
                b["enc_cpu"], b["dec_cpu"] = min(b["enc_cpu"], c1 - c0), min(b["dec_cpu"], c2 - c1)
                size[i] = len(blob)
                if c.lib == "zipccl" and i not in used:
                    used[i] = zc.inspect(blob).codec
                del blob, out
    rows = []
    for i, c in enumerate(cands):
        b = best[i]

        def rate(s: float) -> float:
            return nbytes / s / 1e9 if 0 < s < float("inf") else 0.0

        rows.append({
            "label": c.label, "lib": c.lib, "threads": c.threads, "used": used.get(i, ""),
            "bytes": nbytes, "encoded_bytes": size.get(i, 0),
            "ratio": nbytes / size[i] if size.get(i) else 0.0,
            "enc_gbps": rate(b["enc"]), "dec_gbps": rate(b["dec"]),
            "enc_cpu_gbps": rate(b["enc_cpu"]), "dec_cpu_gbps": rate(b["dec_cpu"]),
            "error": errors.get(i, ""),
        })
    return rows


API_HEADER = (f"{'data':<20} {'dtype':<9} {'MiB':>5}  {'library / codec':<16} {'used':<5} {'thr':<11} "
              f"{'ratio':>7}  {'enc GB/s':>8} {'enc cpu':>7}  {'dec GB/s':>8} {'dec cpu':>7}  "
              f"{'enc/ZipNN':>9} {'dec/ZipNN':>9}")


def _ref(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """ZipNN's one-thread row (the per-thread reference)."""
    return next((r for r in rows if r["lib"] == "zipnn" and r["threads"].split()[0] == "1" and not r["error"]),
                None)


def format_rows(name: str, dtype: str, nbytes: int, rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    ref = _ref(rows)
    lead = f"{name:<20} {dtype:<9} {nbytes / 2**20:>5.1f}  "
    for k, r in enumerate(rows):
        head = lead if k == 0 else " " * len(lead)
        if r["error"]:
            lines.append(head + f"{r['label']:<16} ERROR {r['error']}")
            continue
        if ref is not None and ref["enc_gbps"] and ref["dec_gbps"]:
            rel = f"{r['enc_gbps'] / ref['enc_gbps']:>8.2f}x {r['dec_gbps'] / ref['dec_gbps']:>8.2f}x"
        else:
            rel = f"{'-':>9} {'-':>9}"
        lines.append(head + f"{r['label']:<16} {r['used'] or '-':<5} {r['threads']:<11} {r['ratio']:>7.4f}  "
                     f"{r['enc_gbps']:>8.2f} {r['enc_cpu_gbps']:>7.2f}  {r['dec_gbps']:>8.2f} "
                     f"{r['dec_cpu_gbps']:>7.2f}  {rel}")
    return lines


def check_goals(name: str, dtype: str, rows: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """Issue 28's goals on one data set: zipccl auto's ratio >= ZipNN's;
    its encode and decode >= 1.5x ZipNN's with one thread each; and ahead of
    ZipNN's at each one's default threading."""
    tag = f"{name} {dtype}"
    out: list[tuple[str, bool, str]] = []
    auto = next((r for r in rows if r["label"] == "zipccl auto" and r["threads"] == "1" and not r["error"]), None)
    auto_dflt = next((r for r in rows if r["label"] == "zipccl auto" and r["threads"].startswith("default")
                      and not r["error"]), auto)
    zn = [r for r in rows if r["lib"] == "zipnn" and not r["error"]]
    ref = _ref(rows)
    if auto is None or not zn:
        return out
    out.append((f"{tag}: auto ratio >= ZipNN's", auto["ratio"] >= zn[0]["ratio"],
                f"{auto['ratio']:.4f} ({auto['used']}) vs {zn[0]['ratio']:.4f}"))
    if ref is not None:
        for op in ("enc", "dec"):
            rel = auto[f"{op}_gbps"] / ref[f"{op}_gbps"] if ref[f"{op}_gbps"] else 0.0
            out.append((f"{tag}: auto {op}ode >= 1.5x ZipNN, one thread each", rel >= 1.5,
                        f"{auto[f'{op}_gbps']:.2f} vs {ref[f'{op}_gbps']:.2f} GB/s wall ({rel:.2f}x)"))
    dflt = next((r for r in zn if "default" in r["threads"]), None)
    if dflt is not None and auto_dflt is not None:
        for op in ("enc", "dec"):
            ok = auto_dflt[f"{op}_gbps"] > dflt[f"{op}_gbps"]
            out.append((f"{tag}: auto {op}ode, default threads ({auto_dflt['threads'].split()[0]}), ahead of "
                        f"ZipNN's default ({dflt['threads'].split()[0]})",
                        ok, f"{auto_dflt[f'{op}_gbps']:.2f} vs {dflt[f'{op}_gbps']:.2f} GB/s wall"))
    return out
