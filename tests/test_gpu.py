"""The CUDA kernels (cuda/, libzipccl_cuda.so) against the Go codec, bit for bit.

* the golden vectors of tests/cuda_emu (written by the Go codec: frames,
  split parts, decode+reduce outputs) on the real kernels, the same vectors
  the CPU emulation runs;
* GPU encode -> Go decode (zipccl.codec.decompress) and Go encode
  (zipccl.codec.compress) -> GPU decode, on fresh random tensors of every
  coded dtype, including multi-block tensors and the chunk-per-destination
  layout;
* fused decode+reduce against torch's float32 sum in rank order;
* corrupted frames are rejected.

Every test needs a CUDA GPU and a built libzipccl_cuda.so (``make cuda``):
without them they skip with the reason. ``make test-gpu`` runs them.

With ZIPCCL_CUDA_EMU_LIB pointing at the CPU emulation of the same C API
(build/cuda_emu/libzipccl_cuda_emu.so; ``make test-cuda-emu`` does this)
and no GPU, they run on the emulator instead, on smaller sizes: that
checks this file and the ctypes layer (zipccl.bench.kernels) without a GPU.
"""

from __future__ import annotations

import os
import struct

import pytest
import torch

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "cuda_emu", "golden", "golden.bin")


EMU_LIB = os.environ.get("ZIPCCL_CUDA_EMU_LIB")
EMULATED = not torch.cuda.is_available() and bool(EMU_LIB)


def _skip_reason() -> str | None:
    if EMULATED:
        return None if os.path.exists(EMU_LIB or "") else f"ZIPCCL_CUDA_EMU_LIB={EMU_LIB} does not exist"
    if not torch.cuda.is_available():
        return "no GPU: torch.cuda.is_available() is False"
    from zipccl.bench.kernels import find_library

    if find_library() is None:
        return "libzipccl_cuda.so not built (make cuda) and ZIPCCL_CUDA_LIB not set"
    return None


@pytest.fixture(scope="module")
def k():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from zipccl.bench.kernels import KernelLib

    lib = KernelLib(EMU_LIB, emulated=True) if EMULATED else KernelLib()
    if lib.lib.zccl_device_count() < 1:
        pytest.skip("no GPU: libzipccl_cuda.so sees no CUDA device")
    yield lib
    lib.close()


# ---------------------------------------------------------------- golden vectors

def _load_golden() -> dict[str, bytes]:
    with open(GOLDEN, "rb") as f:
        data = f.read()
    assert data[:8] == b"ZCGOLD1\n"
    out, p = {}, 8
    while p < len(data):
        (nl,) = struct.unpack_from("<H", data, p)
        p += 2
        name = data[p:p + nl].decode()
        p += nl
        (ln,) = struct.unpack_from("<Q", data, p)
        p += 8
        out[name] = data[p:p + ln]
        p += ln
    return out


def _meta(b: bytes) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in b.decode().split())


_LAYOUT = {3: (2, 7, 8), 1: (4, 23, 8), 4: (2, 10, 5), 12: (1, 2, 5), 11: (1, 3, 4)}
_TORCH = {3: torch.bfloat16, 1: torch.float32, 4: torch.float16, 12: torch.float8_e5m2, 11: torch.float8_e4m3fn}
_M64 = (1 << 64) - 1


def _generate(dtype: int, spec: str, n: int, seed: int) -> bytes:
    """The Python twin of cudaGenerate (backend/codec/cuda_golden_test.go)."""
    size, shift, bits = _LAYOUT[dtype]
    maxf = (1 << bits) - 1
    mant_mask = (1 << shift) - 1
    sign_bit = shift + bits
    name, _, arg = spec.partition(":")
    center = int(arg) if arg else 0
    s = seed

    def nxt() -> int:
        nonlocal s
        s = (s + 0x9E3779B97F4A7C15) & _M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    clamp = lambda f: 0 if f < 0 else (maxf if f > maxf else f)  # noqa: E731
    const = nxt()
    out = bytearray(n * size)
    for i in range(n):
        x = nxt()
        sign, mant, field = x & 1, (x >> 32) & mant_mask, 0
        if name in ("gauss", "sparse", "special"):
            field = clamp(center + (x >> 8) % 3 + (x >> 16) % 3 + (x >> 24) % 3 + (x >> 28) % 3 - 4)
        elif name == "wide":
            field = clamp(center + (x >> 8) % 7 + (x >> 16) % 7 + (x >> 24) % 7 - 9)
        elif name == "tight":
            field = clamp(center + (x >> 8) % 4 + (x >> 16) % 4 - 3)
        v = sign << sign_bit | field << shift | mant
        if name == "sparse" and (x >> 40) % 10 < 3:
            v = sign << sign_bit
        elif name == "special" and (x >> 40) % 100 < 4:
            kind = (x >> 48) % 6
            v = [sign << sign_bit,
                 sign << sign_bit | maxf << shift,
                 sign << sign_bit | maxf << shift | (mant | 1),
                 sign << sign_bit | mant,
                 sign << sign_bit | ((x >> 56) & maxf) << shift | mant,
                 sign << sign_bit | (maxf - 1) << shift | mant][kind]
        elif name == "random":
            v = x
        elif name == "const":
            v = const
        out[i * size:(i + 1) * size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(out)


def _tensor(raw: bytes, dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


@pytest.fixture(scope="module")
def golden():
    return _load_golden()


def test_golden_codec_cases(k, golden):
    from zipccl.bench.kernels import DTYPE_CODES

    cases = [n[:-5] for n in golden if n.endswith("/meta") and _meta(golden[n])["op"] == "codec"]
    assert cases
    for name in cases:
        m = _meta(golden[name + "/meta"])
        dt = int(m["dtype"])
        counts = [int(c) for c in m["counts"].split(",")]
        raw = _generate(dt, m["dist"], sum(counts), int(m["seed"]))
        t = _tensor(raw, _TORCH[dt]).to(k.dev)
        assert DTYPE_CODES[t.dtype] == dt
        frames = [golden[f"{name}/frame/{i}"] for i in range(len(counts))]
        got = k.encode(t, counts)
        for i, (g, w) in enumerate(zip(got, frames)):
            assert g == w, f"{name}: GPU frame {i} differs from the Go frame"
        dec = k.decode(frames, counts, t.dtype)
        assert _bits(dec) == raw, f"{name}: GPU decode of the Go frames differs from the input"
        if len(counts) == 1:
            st, dyn = k.encode_split(t)
            if f"{name}/static/0" in golden:
                want_st, want_dyn = golden[f"{name}/static/0"], golden[f"{name}/dynamic/0"]
            else:
                sl = k.lib.zccl_zip3_static_len(dt, counts[0])
                want_st, want_dyn = frames[0][32:32 + sl], frames[0][32 + sl:]
            assert st == want_st and dyn == want_dyn, f"{name}: split parts differ"


def test_golden_reduce_cases(k, golden):
    cases = [n[:-5] for n in golden if n.endswith("/meta") and _meta(golden[n])["op"] == "reduce"]
    assert cases
    for name in cases:
        m = _meta(golden[name + "/meta"])
        dt, op, n, seed = int(m["dtype"]), int(m["rop"]), int(m["n"]), int(m["seed"])
        dists = m["dists"].split(",")
        frames = [golden[f"{name}/frame/{r}"] for r in range(len(dists))]
        got = k.decode_reduce(frames, n, _TORCH[dt], op=op)
        assert _bits(got) == golden[name + "/out"], f"{name}: decode+reduce differs from Go's fold"
        mid = (len(dists) - 1) // 2
        plain = _tensor(_generate(dt, dists[mid], n, seed + mid * 1000), _TORCH[dt]).to(k.dev)
        got = k.decode_reduce(frames, n, _TORCH[dt], op=op, plain={mid: plain})
        assert _bits(got) == golden[name + "/out"], f"{name}: with a plain source"


# ---------------------------------------------------------------- against zipccl.codec

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2]
SIZES = [1, 33, 1000, 16384, 16385, 70001] + ([] if EMULATED else [(1 << 20) + 3])


def _random(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = 1.0 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else 0.02
    return (torch.randn(n, generator=g) * scale).to(dtype)


def _go_frame(t: torch.Tensor) -> bytes:
    import zipccl.codec

    blob = zipccl.codec.compress(t.cpu(), codec="zip3")
    hdr = 12 + 8 * t.dim()  # tensor container header (docs/FORMAT.md 7)
    return blob[hdr:]


def _go_decode(frame: bytes, t: torch.Tensor) -> torch.Tensor:
    import zipccl.codec

    head = b"ZCCT" + bytes([1, {v: k for k, v in _TORCH.items()}[t.dtype], 1, 0]) + struct.pack("<q", t.numel())
    crc = _crc32c(head)
    return zipccl.codec.decompress(head + struct.pack("<I", crc) + frame)


def _crc32c(b: bytes) -> int:
    crc = 0xFFFFFFFF
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_gpu_encode_go_decode(k, dtype):
    for i, n in enumerate(SIZES):
        t = _random(n, dtype, 10 + i)
        frame = k.encode(t.to(k.dev))[0]
        assert frame == _go_frame(t), f"{dtype} n={n}: GPU frame differs from zipccl.codec.compress"
        back = _go_decode(frame, t)
        assert _bits(back) == _bits(t)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_go_encode_gpu_decode(k, dtype):
    for i, n in enumerate(SIZES):
        t = _random(n, dtype, 100 + i)
        got = k.decode([_go_frame(t)], [n], dtype)
        assert _bits(got) == _bits(t), f"{dtype} n={n}"


def test_chunk_per_destination(k):
    counts = [1000, 3, 0, 5001, 16385, 77, 40000]
    t = _random(sum(counts), torch.bfloat16, 7)
    frames = k.encode(t.to(k.dev), counts)
    off = 0
    for c, f in zip(counts, frames):
        assert f == _go_frame(t[off:off + c]), f"chunk of {c}"
        off += c
    assert _bits(k.decode(frames, counts, torch.bfloat16)) == _bits(t)


@pytest.mark.parametrize("nsrc", [1, 2, 4, 8])
def test_decode_reduce_matches_torch(k, nsrc):
    n = 20_003 if EMULATED else 100_003
    srcs = [_random(n, torch.bfloat16, 1000 + r) for r in range(nsrc)]
    frames = [_go_frame(s) for s in srcs]
    got = k.decode_reduce(frames, n, torch.bfloat16)
    acc = srcs[0].float()
    for s in srcs[1:]:
        acc = acc + s.float()
    want = srcs[0] if nsrc == 1 else acc.to(torch.bfloat16)
    assert _bits(got) == _bits(want)


def test_corrupt_frames_rejected(k):
    from zipccl.bench.kernels import ZcclError

    t = _random(40000, torch.bfloat16, 3)
    frame = bytearray(_go_frame(t))
    for pos in (5, 40, 32 + 16 * 3 + 2, len(frame) // 2, len(frame) - 200):
        bad = bytearray(frame)
        bad[pos] ^= 0x10
        with pytest.raises(ZcclError):
            k.decode([bytes(bad)], [t.numel()], torch.bfloat16)
