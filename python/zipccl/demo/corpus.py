"""The demo's training text: the Python standard library's own source.

Why: it is real text (code, comments, docstrings) that every Python ships,
so the demo needs no download; and it is chosen deterministically (the
top-level ``*.py`` files of the stdlib directory, sorted by name, up to a
byte budget), so every rank and every run sees the same corpus on a given
Python installation.
"""

from __future__ import annotations

import os
import sysconfig

import torch


def stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"]


def load_corpus(max_bytes: int = 8 << 20) -> tuple[torch.Tensor, str]:
    """(uint8 tensor of the corpus bytes, a description of where they came
    from)."""
    root = stdlib_dir()
    names = sorted(n for n in os.listdir(root) if n.endswith(".py"))
    chunks: list[bytes] = []
    total = 0
    used = 0
    for name in names:
        try:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
        except OSError:
            continue
        chunks.append(data)
        total += len(data)
        used += 1
        if total >= max_bytes:
            break
    blob = b"".join(chunks)[:max_bytes]
    if len(blob) < 1 << 16:
        raise RuntimeError(f"the corpus in {root} is too small ({len(blob)} bytes)")
    tensor = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    return tensor, f"{used} stdlib .py files from {root} ({len(blob) / 2**20:.1f} MiB)"


def batch(corpus: torch.Tensor, step: int, rank: int, batch_size: int, seq_len: int,
          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank's batch for a step: random windows, a function of (seed, step,
    rank) only, so any backend sees the same data at the same step. Returns
    (inputs, targets) of shape (batch_size, seq_len), int64."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    starts = torch.randint(0, corpus.numel() - seq_len - 1, (batch_size,), generator=gen)
    idx = starts[:, None] + torch.arange(seq_len + 1)[None, :]
    window = corpus[idx].long()
    return window[:, :-1], window[:, 1:]
