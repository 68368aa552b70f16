"""Writes the demo capture of `python -m zipccl bench codec` (its default
150 steps, seed 0; cached as the benchmark caches it) as raw files
/tmp/demo_{weights,gradients,activations}.{bf16,fp16,fp32}."""
import torch

from zipccl.bench.codec import capture_demo

d = capture_demo(150, 0, None)
for k in ("weights", "gradients", "activations"):
    t = d[k]
    t.to(torch.bfloat16).view(torch.int16).numpy().tofile(f"/tmp/demo_{k}.bf16")
    t.to(torch.float16).numpy().tofile(f"/tmp/demo_{k}.fp16")
    t.to(torch.float32).numpy().tofile(f"/tmp/demo_{k}.fp32")
