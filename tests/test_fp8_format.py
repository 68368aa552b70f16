"""The fp8 lossy message (TACO) against a NumPy reference of its equations
(tests/fp8_reference.py): for B in 32..1024 and float32, bfloat16 and
float16 inputs, the reference's main and exact parts and decoded values
must equal tests/golden/fp8_numpy.bin byte for byte, and
backend/quant/fp8_golden_test.go checks the Go encoder and decoder against
the same file. ZIPCCL_WRITE_GOLDEN=1 rewrites it from the reference."""

from __future__ import annotations

import os
import struct

import numpy as np
from fp8_reference import decode, encode, from_bits, to_bits

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "fp8_numpy.bin")
BLOCKS = (32, 64, 128, 256, 512, 1024)


def inputs(block: int, seed: int) -> np.ndarray:
    """Five blocks and a short tail: Gaussian of log-normal scale; zero; a
    NaN; 0.1 % outliers at 50x; tiny (travels exact); then small values
    (1e-5). Seeds 1 mod 3 add a block whose transform overflows and one
    whose squares overflow (α = 0)."""
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal(block) * np.exp(rng.standard_normal()),
             np.zeros(block),
             np.where(np.arange(block) == 3, np.nan, rng.standard_normal(block)),
             rng.standard_normal(block) * np.where(rng.random(block) < 0.001 * 8, 50, 1),
             rng.standard_normal(block) * 1e-35]
    if seed % 3 == 1:
        parts += [np.full(block, 3e37), rng.standard_normal(block) * 1e20]
    parts.append(rng.standard_normal(block // 3 + 1) * 1e-5)
    return np.concatenate(parts).astype(np.float32)


def cases():
    for i, block in enumerate(BLOCKS):
        for j, dt in enumerate(("float32", "bfloat16", "float16")):
            seed = 3 * i + j
            x = inputs(block, seed)
            if dt == "float16":
                x = np.clip(x, -6e4, 6e4)  # keep float16's blocks finite where float32's are
            yield f"b{block}_{dt}_s{seed}", dt, block, to_bits(x, dt)


def record(name: str, dt: str, block: int, bits: np.ndarray) -> bytes:
    main, exact = encode(bits, dt, block)
    dec = decode(main, exact, dt).tobytes()
    out = struct.pack("<I", len(name)) + name.encode() + struct.pack("<BI", {"float32": 1, "bfloat16": 3, "float16": 4}[dt], block)
    for part in (bits.tobytes(), main, exact, dec):
        out += struct.pack("<I", len(part)) + part
    return out


def test_reference_matches_golden() -> None:
    got = b"".join(record(*c) for c in cases())
    if os.environ.get("ZIPCCL_WRITE_GOLDEN") == "1":
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN, "wb") as f:
            f.write(got)
    with open(GOLDEN, "rb") as f:
        want = f.read()
    assert got == want, "the NumPy reference no longer writes tests/golden/fp8_numpy.bin"


def test_reference_round_trip_error() -> None:
    # the reference codes as the format promises, so that its bytes are
    # worth comparing with: relative L2 error under 0.03 on the first block
    for name, dt, block, bits in cases():
        main, exact = encode(bits, dt, block)
        a = from_bits(bits, dt)[:block].astype(np.float64)
        b = from_bits(decode(main, exact, dt), dt)[:block].astype(np.float64)
        assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.03, name
