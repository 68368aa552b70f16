#!/usr/bin/env python3
"""Regenerate golden.json: PyTorch's (CPU) results for the scalar conversions
in package dtype. Requires torch and numpy.

    python3 gen_golden.py               # tables, samples and vectors (seconds)
    python3 gen_golden.py --exhaustive  # also hash all 2**32 float32 inputs (minutes)

Hash layouts (the Go tests rebuild them the same way):
  * e4m3fn_to_f32, e5m2_to_f32: the float32 bit patterns for inputs 0..255,
    eight per string.
  * vectors: "function input output" in hex, for selected inputs.
  * *_to_f32_sha256: SHA-256 of the float32 results (little-endian uint32) for
    all inputs 0..2**16-1 in order.
  * sample_*_sha256: SHA-256 of the results (little-endian, 2 or 1 bytes each)
    for the float32 bit patterns hi<<16|lo, hi = 0..65535 (outer loop), lo in
    SAMPLE_LOWS (inner loop). The lows sit around every rounding point.
  * exhaustive_*_sha256: the results for all 2**32 float32 bit patterns are
    cut into 256 chunks of 2**24 inputs; this is SHA-256 of the concatenated
    SHA-256 digests of the chunks.

One deliberate difference from torch: torch's vectorised float32->bfloat16
kernel writes 0xFFFF for NaN, while c10::BFloat16's scalar conversion (which
package dtype implements) gives 0x7FC0. The bfloat16 results of torch are
therefore canonicalised to 0x7FC0 where the input is NaN.
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch

SAMPLE_LOWS = [0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000,
               0x7FFF, 0x8000, 0x8001, 0xF000, 0xFFFF]

TARGETS = {
    "bf16": (torch.bfloat16, np.uint16),
    "f16": (torch.float16, np.uint16),
    "e4m3fn": (torch.float8_e4m3fn, np.uint8),
    "e5m2": (torch.float8_e5m2, np.uint8),
}


def from_f32(bits_u32, name):
    """Convert float32 bit patterns with torch; returns unsigned ints."""
    x = torch.from_numpy(bits_u32.view(np.float32))
    tdt, npdt = TARGETS[name]
    out = x.to(tdt).view(torch.int16 if npdt == np.uint16 else torch.uint8)
    out = out.numpy().view(npdt).copy()
    if name == "bf16":
        out[np.isnan(bits_u32.view(np.float32))] = 0x7FC0
    return out


def to_f32(bits, tdt):
    """Widen bit patterns of dtype tdt to float32 with torch; returns uint32."""
    t = torch.from_numpy(bits)
    if bits.dtype == np.uint16:
        t = t.view(torch.int16)
    return t.view(tdt).to(torch.float32).view(torch.int32).numpy().view(np.uint32)


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest()


def f32bits(vals):
    return np.array(vals, dtype=np.float32).view(np.uint32)


def vectors():
    special = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,
               0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
               0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
               0x7FBFFFFF, 0x7FFFFFFF, 0xFF812345, 0x7FC02000, 0x7FA00000]
    vals = [
        1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20,          # bf16 ties
        65504.0, 65519.0, 65519.996, 65520.0, 65536.0, 1e10,   # f16 top
        2**-14, 2**-14 - 2**-24, 2**-24, 2**-25, 2**-25 * 1.0001,
        3 * 2**-26, 2**-26, 1 + 2**-11, 1 + 3 * 2**-11,        # f16 bottom/ties
        448.0, 464.0, 465.0, 470.0, 479.9, 480.0, 1e6,         # e4m3fn top
        2**-6, 2**-9, 2**-10, 2**-10 * 1.01, 3 * 2**-10, 2**-7 * 1.5,
        57344.0, 61439.0, 61440.0, 65535.0,                    # e5m2 top
        2**-14 * 1.25, 2**-16, 2**-17, 2**-17 * 1.01, 3 * 2**-17,
        0.1, -0.1, 3.14159, -2.5, 1 / 3,
    ]
    ins = np.concatenate([np.array(special, dtype=np.uint32), f32bits(vals),
                          f32bits([-v for v in vals])])
    out = []
    for name, (_, npdt) in TARGETS.items():
        res = from_f32(ins, name)
        for i, r in zip(ins, res):
            out.append("f32_to_%s %08x %0*x" % (name, i, npdt().itemsize * 2, r))
    for name, tdt in [("bf16", torch.bfloat16), ("f16", torch.float16)]:
        hs = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0x7BFF,
                       0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE00, 0x7DFF, 0x7FFF,
                       0x7F80, 0x7FC0, 0xFF81, 0x3F80, 0x0080], dtype=np.uint16)
        for i, r in zip(hs, to_f32(np.tile(hs, 64), tdt)[: len(hs)]):
            out.append("%s_to_f32 %04x %08x" % (name, i, r))
    return out


def exhaustive():
    chunk = 1 << 24
    digests = {name: hashlib.sha256() for name in TARGETS}
    for k in range(256):
        ins = np.arange(k * chunk, (k + 1) * chunk, dtype=np.uint64).astype(np.uint32)
        for name in TARGETS:
            digests[name].update(hashlib.sha256(from_f32(ins, name).tobytes()).digest())
        print("chunk %d/256" % (k + 1), file=sys.stderr, end="\r")
    print(file=sys.stderr)
    return {"exhaustive_f32_to_%s_sha256" % n: d.hexdigest() for n, d in digests.items()}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "golden.json")
    old = {}
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)

    g = {"torch_version": torch.__version__}
    all16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    g["bf16_to_f32_sha256"] = sha(to_f32(all16, torch.bfloat16))
    g["f16_to_f32_sha256"] = sha(to_f32(all16, torch.float16))
    all8 = np.arange(256, dtype=np.uint8)
    for name, tdt in [("e4m3fn", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)]:
        t = ["%08x" % v for v in to_f32(all8, tdt)]
        g[name + "_to_f32"] = [" ".join(t[i:i + 8]) for i in range(0, 256, 8)]

    lows = np.array(SAMPLE_LOWS, dtype=np.uint32)
    samples = ((np.arange(1 << 16, dtype=np.uint32)[:, None] << 16) | lows[None, :]).ravel()
    for name in TARGETS:
        g["sample_f32_to_%s_sha256" % name] = sha(from_f32(samples, name))
    g["vectors"] = vectors()

    if "--exhaustive" in sys.argv:
        g.update(exhaustive())
    else:
        for k, v in old.items():
            if k.startswith("exhaustive_"):
                g[k] = v
    with open(path, "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
