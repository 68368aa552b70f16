"""A NumPy reference of zipccl's fp8 lossy message (TACO; docs/FORMAT.md
11, "Coding an fp8 block"), written from the equations, not from the Go
code: float32 NumPy arithmetic in the documented order, and an E4M3
rounding of its own (frexp and round-half-even, not torch's nor Go's).

test_fp8_format.py compares its bytes with tests/golden/fp8_numpy.bin, and
backend/quant/fp8_golden_test.go compares the Go encoder and decoder with
the same file: the Go payload equals this reference byte for byte.
"""

from __future__ import annotations

import struct

import numpy as np

F32 = np.float32
TAU, EPS, QMAX = F32(448), F32(1e-6), F32(448)
TINY = F32(2.0**-100)
DTYPE_CODES = {"float32": 1, "bfloat16": 3, "float16": 4}


def to_bits(x: np.ndarray, dt: str) -> np.ndarray:
    """float32 values rounded (nearest even) to dt, as dt's raw bits."""
    x = x.astype(F32)
    if dt == "float32":
        return x.view(np.uint32)
    if dt == "float16":
        return x.astype(np.float16).view(np.uint16)
    u = x.view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(x)
    r[nan] = (u[nan] >> 16) | 0x40  # quiet NaN, sign and payload kept
    return r.astype(np.uint16)


def from_bits(b: np.ndarray, dt: str) -> np.ndarray:
    """dt's raw bits widened to float32 (exact)."""
    if dt == "float32":
        return b.view(F32)
    if dt == "float16":
        return b.view(np.float16).astype(F32)
    return (b.astype(np.uint32) << 16).view(F32)


def e4m3(y: np.ndarray) -> np.ndarray:
    """float32 -> E4M3 codes: nearest, ties to even, saturating to ±448."""
    a = np.abs(y.astype(np.float64))
    _, ex = np.frexp(a)
    e = np.maximum(ex - 1, -6)  # the binade; below 2^-6 the subnormal step 2^-9
    step = np.ldexp(1.0, e - 3)
    m = np.minimum(np.round(a / step) * step, 448.0)  # np.round: half to even
    _, ex2 = np.frexp(m)
    e2 = ex2 - 1
    normal = m >= 2.0**-6
    code = np.where(normal, ((e2 + 7) << 3) + np.round(np.ldexp(m, -e2) * 8 - 8).astype(np.int64),
                    np.round(m * 512).astype(np.int64))
    return (code | (np.signbit(y).astype(np.int64) << 7)).astype(np.uint8)


def e4m3_values() -> np.ndarray:
    """The float32 value of every code (the NaN codes 0x7F, 0xFF: NaN)."""
    c = np.arange(256)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * np.ldexp(1.0, e - 7))
    v = np.where(c & 0x80, -v, v)
    v[(c & 0x7F) == 0x7F] = np.nan
    return v.astype(F32)


def fwht(u: np.ndarray) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform in float32, strides 1 .. B/2."""
    u = u.astype(F32).copy()
    h = 1
    while h < u.size:
        v = u.reshape(-1, 2, h)
        a, b = v[:, 0, :].copy(), v[:, 1, :].copy()
        v[:, 0, :], v[:, 1, :] = a + b, a - b
        h *= 2
    return u


def alpha(x: np.ndarray, block: int) -> np.float32:
    """τ/σ, the squares of the zero-padded block summed as a tree."""
    with np.errstate(over="ignore", divide="ignore"):
        t = np.zeros(block, F32)
        t[:x.size] = x * x
        h = block // 2
        while h >= 1:
            t[:h] = t[:h] + t[h:2 * h]
            h //= 2
        return TAU / np.sqrt(t[0] / F32(x.size) + EPS)


def encode(bits: np.ndarray, dt: str, block: int) -> tuple[bytes, bytes]:
    """The main and exact parts of an fp8 message of the elements bits (dt)."""
    x_all = from_bits(bits, dt)
    n = x_all.size
    nb = -(-n // block)
    scales, codes, exact, nexact = [], [], [], 0
    for b in range(nb):
        x = x_all[b * block:(b + 1) * block]
        raw = bits[b * block:(b + 1) * block].tobytes()
        if np.all(np.isfinite(x)):
            a = alpha(x, block)
            u = np.zeros(block, F32)
            u[:x.size] = x
            with np.errstate(over="ignore", invalid="ignore"):
                u = fwht(u)
                m = np.max(np.abs(u))
            if m == 0:
                scales.append(struct.pack("<ff", 0.0, a))
                codes.append(bytes(block))
                continue
            if np.isfinite(m) and m >= TINY:
                scales.append(struct.pack("<ff", m / QMAX, a))
                codes.append(e4m3(u * (QMAX / m)).tobytes())
                continue
        scales.append(struct.pack("<II", 0xFFFFFFFF, 0))
        codes.append(bytes(block))
        exact.append(raw)
        nexact += 1
    header = b"ZQ" + bytes([1, 3, DTYPE_CODES[dt], block.bit_length() - 1, 0, 0]) + struct.pack("<QII", n, nexact, 0)
    return header + b"".join(scales) + b"".join(codes), b"".join(exact)


def values(main: bytes, exact: bytes, dt: str) -> np.ndarray:
    """The float32 values of an fp8 message of dt, as dequantize+reduce
    adds them (not rounded to dt; exact blocks widened)."""
    return from_bits(decode(main, exact, dt, wide=True), "float32")


def decode(main: bytes, exact: bytes, dt: str, wide: bool = False) -> np.ndarray:
    """The decoded elements of an fp8 message of dt: dt's bits, or with
    wide float32 bits unrounded."""
    n, = struct.unpack_from("<Q", main, 8)
    block = 1 << main[5]
    nb = -(-n // block)
    vals = e4m3_values()
    es = {"float32": 4, "bfloat16": 2, "float16": 2}[dt]
    out, off = [], 0
    codes = np.frombuffer(main, np.uint8, offset=24 + 8 * nb)
    for b in range(nb):
        m = min(n, (b + 1) * block) - b * block
        s_bits, = struct.unpack_from("<I", main, 24 + 8 * b)
        if s_bits == 0xFFFFFFFF:
            raw = exact[off:off + m * es]
            off += m * es
            raw = np.frombuffer(raw, np.uint32 if es == 4 else np.uint16)
            out.append(from_bits(raw, dt).view(np.uint32) if wide else raw)
            continue
        s = np.frombuffer(main, F32, 1, 24 + 8 * b)[0]
        v = fwht(vals[codes[b * block:(b + 1) * block]])
        out.append(to_bits(v[:m] * (s / F32(block)), "float32" if wide else dt))
    return np.concatenate(out)
