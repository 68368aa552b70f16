"""qgZ's block size, measured on real gradients (RESULTS.md, "Lossy
collectives"): the error of zipccl's blockwise int4 (scale absmax/7, no
clipping) for block sizes 128 to 4096 against DeepSpeed's qgZ formula
(swizzle_quant, 4 bits: scale 2^4 / (2 absmax), clipped to [-8, 7], groups
= max(rows, cols, world) per 2-D gradient; 1-D gradients fall back to an
exact reduce_scatter there) on the same tensors: the gradients of the
demo's GPT (d_model 192, 4 layers; 16 sequences of 128 bytes) at steps 1,
10 and 30 of AdamW training on one process, float32, as FSDP
reduce-scatters them (one flat buffer per step).

    python3 benchmarks/qgz_block_size.py
"""
import math

import numpy as np
import torch

from zipccl.demo.corpus import batch, load_corpus
from zipccl.demo.model import GPT, GPTConfig

WORLD = 4  # DeepSpeed's group count takes the world size into account


def ours(x: np.ndarray, B: int) -> np.ndarray:
    """zipccl's int4 (backend/quant), the tail block included."""
    y = np.empty_like(x)
    for lo in range(0, x.size, B):
        b = x[lo:lo + B]
        am = np.float32(np.abs(b).max())
        if am == 0:
            y[lo:lo + B] = 0
            continue
        s, inv = np.float32(am / np.float32(7)), np.float32(np.float32(7) / am)
        q = np.rint((b * inv).astype(np.float32))
        y[lo:lo + B] = (q * s).astype(np.float32)
    return y


def deepspeed(g: torch.Tensor) -> np.ndarray:
    """DeepSpeed's 4-bit symmetric quantizer on one gradient tensor (1-D:
    exact, as its qgZ falls back)."""
    x = g.detach().float().numpy().astype(np.float32).ravel()
    if g.dim() < 2:
        return x.copy()
    groups = max(g.shape[0], g.shape[1], WORLD)
    while x.size % groups:
        groups -= 1
    xb = x.reshape(groups, -1)
    am = np.abs(xb).max(axis=1, keepdims=True).astype(np.float32)
    am = np.where(am == 0, np.float32(1), am)
    s = (np.float32(16) / (np.float32(2) * am)).astype(np.float32)
    q = np.clip(np.rint((xb * s).astype(np.float32)), -8, 7)
    return (q / s).astype(np.float32).ravel()


def err(x: np.ndarray, y: np.ndarray) -> float:
    d = y.astype(np.float64) - x.astype(np.float64)
    return math.sqrt((d * d).mean()) / math.sqrt((x.astype(np.float64) ** 2).mean())


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = GPTConfig()
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    corpus, where = load_corpus(8 << 20)
    print(f"the demo's GPT ({model.num_params()} parameters), gradients of 16 x 128 bytes from {where}")
    rows = {}
    for step in range(1, 31):
        x, y = batch(corpus, step, 0, 16, cfg.seq_len, 0)
        loss = model(x, y)
        loss.backward()
        if step in (1, 10, 30):
            params = [p for p in model.parameters() if p.grad is not None]
            flat = np.concatenate([p.grad.detach().float().numpy().ravel() for p in params]).astype(np.float32)
            ds = np.concatenate([deepspeed(p.grad) for p in params])
            rows.setdefault("deepspeed (2-D: groups of max(rows, cols, 4); 1-D exact)", []).append(err(flat, ds))
            for B in (128, 256, 512, 1024, 2048, 4096):
                rows.setdefault(f"zipccl B={B}", []).append(err(flat, ours(flat, B)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("relative RMS error of int4 against the float32 gradient, steps 1 / 10 / 30:")
    for name, es in rows.items():
        print(f"  {name:<58} " + " / ".join(f"{e:.4f}" for e in es))


if __name__ == "__main__":
    main()
