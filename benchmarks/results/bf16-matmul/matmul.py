"""One thread: a (512, 192) @ (192, 768) product and its backward, in
float32 and in bfloat16 (the demo GPT's MLP shape at d_model 192, one
rank's batch of 4 x 128 positions). Prints the CPU's AVX-512 flags and the
mean time of 20 repeats after 3 warm-ups."""

import re
import time

import torch

torch.set_num_threads(1)
with open("/proc/cpuinfo") as f:
    flags = sorted(set(re.findall(r"\bavx512\w*|\bamx\w*", f.read())))
print("cpu flags:", " ".join(flags) or "(no avx512, no amx)")
for dt in (torch.float32, torch.bfloat16):
    a = torch.randn(512, 192, dtype=dt, requires_grad=True)
    w = torch.randn(768, 192, dtype=dt, requires_grad=True)
    for i in range(23):
        if i == 3:
            t = time.perf_counter()
        (a @ w.t()).sum().backward()
    print(f"{dt}: {(time.perf_counter() - t) / 20 * 1e3:.1f} ms")
