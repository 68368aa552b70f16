"""zipccl.codec: the Python API over the Go codec (compress/decompress,
inspect, estimate_ratio), and a smoke run of ``python -m zipccl bench codec``.

Round trips are checked bit for bit on the integer views of the tensors, so
NaN payloads, signed zeros, infinities and subnormals all count.
"""

from __future__ import annotations

import csv
import json
import os
import struct
import subprocess
import sys
import threading
import zlib

import pytest
import torch

import zipccl.codec as zc

FLOAT_DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2]
OTHER_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
ALL_DTYPES = FLOAT_DTYPES + OTHER_DTYPES
CODECS = ["auto", "zip3", "huff", "huff2", "raw"]

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of t as an integer tensor of the same shape."""
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(_INT_VIEW[t.element_size()])


def assert_bit_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.equal(bits(a), bits(b))


def random_bits(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Every bit pattern equally likely (NaNs with payloads, infinities,
    subnormals, -0 included)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for d in shape:
        n *= d
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw > 127).reshape(shape)
    return raw.view(dtype).reshape(shape)


def gaussian(shape, dtype: torch.dtype, sigma: float = 0.02, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32) * sigma
    if dtype == torch.bool:
        return x > 0
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return (x * 1000).round().clamp(info.min, info.max).to(dtype)
    return x.to(dtype)


def roundtrip(t: torch.Tensor, codec: str) -> bytes:
    blob = zc.compress(t, codec)
    assert isinstance(blob, bytes)
    back = zc.decompress(blob)
    assert back.is_contiguous() and back.device.type == "cpu"
    assert_bit_equal(back, t.contiguous())
    return blob


# --------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_dtype_and_codec(dtype, codec):
    # Sizes around the block sizes (zip3 16384, huff/raw 65536 elements).
    for shape in [(1000,), (16384 + 3,), (3, 65536 + 5)]:
        roundtrip(gaussian(shape, dtype), codec)
        roundtrip(random_bits(shape, dtype, seed=1), codec)


def test_large_bf16_beyond_the_cache():
    """48 MiB of bf16, past the L3 of most CPUs: the encoder's non-temporal
    R8 stores and the decoder's non-temporal output are on."""
    t = gaussian((24 << 20,), torch.bfloat16, seed=17)
    info = zc.inspect(roundtrip(t, "zip3"))
    assert info.codec == "zip3" and info.ratio > 1.4, info


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_shapes_scalar_empty_and_many_dims(dtype):
    for shape in [(), (0,), (5, 0, 3), (1,), (1, 1, 1), (2, 3, 4, 5, 6), (7,) * 1 + (1,) * 20]:
        t = random_bits(shape, dtype, seed=2)
        for codec in CODECS:
            blob = roundtrip(t, codec)
            info = zc.inspect(blob)
            assert info.shape == t.shape and info.dtype == dtype
            assert info.compressed_bytes == len(blob)
            assert info.raw_bytes == t.numel() * t.element_size()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16, torch.int64, torch.float8_e5m2],
                         ids=str)
def test_non_contiguous(dtype):
    base = gaussian((300, 200), dtype, seed=3)
    views = [
        base.t(),                      # transposed
        base[::3, 1::2],               # strided slices
        base[:, 5],                    # a column
        base.unsqueeze(0).expand(4, 300, 200),  # zero strides
        base[10:20].flip(0),           # negative step via flip (a copy) of a view
    ]
    for v in views:
        for codec in ("auto", "zip3", "huff", "huff2"):
            blob = zc.compress(v, codec)
            back = zc.decompress(blob)
            assert back.shape == v.shape
            assert_bit_equal(back, v.contiguous())


def test_parameter_requires_grad_and_neg_view():
    p = torch.nn.Parameter(gaussian((64, 64), torch.float32))
    assert_bit_equal(zc.decompress(zc.compress(p)), p.detach())
    x = gaussian((1000,), torch.float32)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    assert_bit_equal(zc.decompress(zc.compress(neg, "zip3")), -x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_special_values_bit_exact(dtype):
    size = torch.empty((), dtype=dtype).element_size()
    ity = _INT_VIEW[size]
    nbits = 8 * size
    exp_bits = {2: 8 if dtype == torch.bfloat16 else 5, 4: 8, 8: 11}[size]
    mant = nbits - 1 - exp_bits
    sign = 1 << (nbits - 1)
    expmask = ((1 << exp_bits) - 1) << mant

    def s(v: int) -> int:  # to the signed value of the integer view
        return v - (1 << nbits) if v >= 1 << (nbits - 1) else v

    patterns = [
        0, sign,                           # +0, -0
        expmask, expmask | sign,           # +-inf
        expmask | 1, expmask | 1 | sign,   # signalling NaNs with payload 1
        expmask | (1 << (mant - 1)),       # quiet NaN
        expmask | ((1 << mant) - 1),       # NaN, all payload bits
        expmask | (1 << (mant - 1)) | 0x5 | sign,  # negative NaN with payload
        1, 1 | sign, (1 << mant) - 1,      # subnormals
        1 << mant,                         # smallest normal
        expmask - 1,                       # largest finite
    ]
    special = torch.tensor([s(p) for p in patterns], dtype=ity).view(dtype)
    # Specials scattered through Gaussian data, so the coded paths (not a
    # raw fallback) carry them as escapes.
    data = gaussian((50_000,), dtype, seed=4)
    idx = torch.randperm(data.numel(), generator=torch.Generator().manual_seed(5))[: 20 * len(patterns)]
    data_bits = bits(data).clone()
    data_bits[idx] = bits(special).repeat(20)
    data = data_bits.view(dtype)
    for codec in CODECS:
        blob = roundtrip(data, codec)
        if dtype != torch.float64 and codec in ("zip3", "huff", "huff2"):
            assert zc.inspect(blob).codec == codec  # still coded, not stored raw
        roundtrip(special, codec)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_float8_all_bit_patterns(dtype):
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    data = every.repeat(300)[torch.randperm(256 * 300, generator=torch.Generator().manual_seed(6))]
    for codec in CODECS:
        roundtrip(data, codec)
        roundtrip(every, codec)


def test_codec_names_and_kinds():
    t = gaussian((100_000,), torch.bfloat16)
    kinds = {c: zc.inspect(zc.compress(t, c)).codec for c in CODECS}
    assert kinds["zip3"] == "zip3" and kinds["huff"] == "huff" and kinds["raw"] == "raw"
    assert kinds["huff2"] == "huff2"
    assert kinds["auto"] in set(zc.CODECS) - {"auto", "raw"}  # a coding kind (huff2 once it exists)
    assert kinds["auto"] == zc.choose_codec(t)
    # case and surrounding blanks do not matter
    assert zc.inspect(zc.compress(t, " HUFF ")).codec == "huff"
    # uncoded dtypes are framed raw whatever is asked
    for c in CODECS:
        assert zc.inspect(zc.compress(torch.arange(1000), c)).codec == "raw"
        assert zc.inspect(zc.compress(gaussian((1000,), torch.float64), c)).codec == "raw"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn], ids=str)
@pytest.mark.parametrize("numel", [50_000, 300_000, 3_000_000])
def test_auto_takes_the_best_ratio(dtype, numel):
    """The Python API's auto writes the smallest of the coding kinds (issue
    28): exactly on a small tensor (the whole of it is tried), within the
    sampling error on a larger one; and choose_codec names what it writes."""
    t = gaussian((numel,), dtype, sigma=0.02, seed=11)
    sizes = {c: len(zc.compress(t, c)) for c in zc.CODECS if c not in ("auto", "raw")}
    blob = zc.compress(t, "auto")
    assert_bit_equal(zc.decompress(blob), t)
    slack = 1.0 if numel <= 65536 else 1.003
    assert len(blob) <= min(sizes.values()) * slack, (len(blob), sizes)
    assert zc.inspect(blob).codec == zc.choose_codec(t)
    # random bits shrink under no kind: auto writes raw, or a kind whose
    # frame is strictly smaller (packed huff2 stores the planes raw with
    # less framing than a raw frame's), never one just as long (huff may
    # write a frame of raw blocks exactly raw's length, which must not win)
    rb = random_bits((numel,), dtype, seed=2)
    auto, raw = zc.compress(rb, "auto"), zc.compress(rb, "raw")
    assert len(auto) <= len(raw)
    assert zc.choose_codec(rb) == "raw" or len(auto) < len(raw), (zc.choose_codec(rb), len(auto), len(raw))
    assert_bit_equal(zc.decompress(auto), rb)


def test_incompressible_never_expands_beyond_header():
    for dtype in (torch.bfloat16, torch.float32, torch.float16, torch.float8_e4m3fn):
        t = random_bits((200_000,), dtype, seed=7)
        raw = t.numel() * t.element_size()
        for codec in CODECS:
            blob = zc.compress(t, codec)
            # container header (12 + 8*ndim) + frame header 32 + index (16 B
            # per 65536 elements) + padding to 128
            assert len(blob) <= raw + 12 + 8 + 32 + 128 + 16 * (t.numel() // 65536 + 1) + 128, (dtype, codec)


def test_bytes_like_inputs():
    t = gaussian((5000,), torch.bfloat16)
    blob = zc.compress(t, "huff")
    assert_bit_equal(zc.decompress(bytearray(blob)), t)
    assert_bit_equal(zc.decompress(memoryview(blob)), t)
    padded = b"\x00" * 7 + blob + b"\x00" * 9
    assert_bit_equal(zc.decompress(memoryview(padded)[7:-9]), t)
    # a non-contiguous memoryview is accepted (copied)
    doubled = bytes(b for pair in zip(blob, blob) for b in pair)
    assert_bit_equal(zc.decompress(memoryview(doubled)[::2]), t)
    assert zc.inspect(memoryview(blob)).compressed_bytes == len(blob)
    with pytest.raises(TypeError):
        zc.decompress("not bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        zc.decompress(t)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["zip3", "huff", "raw"])
def test_decompress_into_out(codec):
    t = gaussian((5, 70000), torch.bfloat16, seed=3)
    blob = zc.compress(t, codec)
    for out in (torch.empty(5, 70000, dtype=torch.bfloat16), torch.full((350000,), 7.0, dtype=torch.bfloat16)):
        version = out._version
        got = zc.decompress(blob, out=out)
        assert got is out and out._version > version
        assert torch.equal(bits(out.reshape(5, 70000)), bits(t))
    # 4 MiB and more: the fresh output is advised onto huge pages; the bytes
    # are the same
    big = gaussian((3 << 20,), torch.float32, seed=4)
    assert_bit_equal(zc.decompress(zc.compress(big, codec)), big)


def test_decompress_out_errors():
    blob = zc.compress(gaussian((1000,), torch.float16), "huff")
    with pytest.raises(ValueError, match="1000"):
        zc.decompress(blob, out=torch.empty(999, dtype=torch.float16))
    with pytest.raises(ValueError, match="Half"):
        zc.decompress(blob, out=torch.empty(1000, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="contiguous"):
        zc.decompress(blob, out=torch.empty(2000, dtype=torch.float16)[::2])
    with pytest.raises(ValueError, match="grad"):
        zc.decompress(blob, out=torch.empty(1000, dtype=torch.float16, requires_grad=True))
    with pytest.raises(TypeError):
        zc.decompress(blob, out=bytearray(2000))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        zc.decompress(blob[:-1], out=torch.empty(1000, dtype=torch.float16))


@pytest.mark.parametrize("codec", ["auto", "zip3", "huff", "huff2", "raw"])
def test_threads_do_not_change_the_bytes(codec, monkeypatch):
    """compress and decompress code one frame on several threads (runs of
    2^22-element segments): the bytes are the same for every thread count
    and CPU count, and every thread count decodes every blob."""
    t = gaussian((3, 3_000_000 + 4321), torch.bfloat16, seed=5)  # 2.1 segments
    single = zc.compress(t, codec, threads=1)
    assert single[:4] == b"ZCCT"
    for threads in (2, 3, 16, None):
        assert zc.compress(t, codec, threads=threads) == single, threads
    for cpus in ({0}, {0, 1}, set(range(64))):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, c=cpus: c)
        assert zc.compress(t, codec) == single, len(cpus)
        assert_bit_equal(zc.decompress(single), t)
    for threads in (1, 2, 5, None):
        assert_bit_equal(zc.decompress(single, threads=threads), t)
        out = torch.empty(t.numel(), dtype=t.dtype)
        assert zc.decompress(memoryview(single), out=out, threads=threads) is out
        assert torch.equal(bits(out.reshape(t.shape)), bits(t))
    for bad in (0, -1):
        with pytest.raises(ValueError, match="threads"):
            zc.compress(t, codec, threads=bad)
        with pytest.raises(ValueError, match="threads"):
            zc.decompress(single, threads=bad)
    for bad in ("2", 2.0, True):
        with pytest.raises(TypeError, match="threads"):
            zc.compress(t, codec, threads=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="threads"):
            zc.decompress(single, threads=bad)  # type: ignore[arg-type]


def _chunked(t: torch.Tensor, codec: str, chunks: int) -> bytes:
    """A chunked container (docs/FORMAT.md 7a), as compress wrote them for
    tensors of 8 MiB or more before it coded one frame on several threads:
    the header, then one 1-D container per run of whole 65536-element
    blocks."""
    flat = t.reshape(-1)
    per = flat.numel() // 65536 // chunks * 65536
    bounds = [i * per for i in range(chunks)] + [flat.numel()]
    parts = [zc.compress(flat[a:b].clone(), codec) for a, b in zip(bounds, bounds[1:])]
    head = bytearray(b"ZCCM") + bytes([1, zc._DTYPE_CODES[t.dtype], t.dim(), 0])
    head += struct.pack(f"<{t.dim()}q", *t.shape) + struct.pack("<II", chunks, 0)
    head += struct.pack(f"<{chunks}Q", *map(len, parts))
    head += struct.pack("<I", zlib.crc32(head))
    return bytes(head) + b"".join(parts)


@pytest.mark.parametrize("codec", ["zip3", "huff2"])
def test_chunked_container_still_reads(codec):
    t = gaussian((3, 1_500_000 + 4321), torch.bfloat16, seed=5)
    blob = _chunked(t, codec, 3)
    for threads in (1, 2):
        assert_bit_equal(zc.decompress(blob, threads=threads), t)
    assert_bit_equal(zc.decompress(bytearray(blob)), t)
    out = torch.empty(t.numel(), dtype=t.dtype)
    assert zc.decompress(memoryview(blob), out=out) is out
    assert torch.equal(bits(out.reshape(t.shape)), bits(t))
    info = zc.inspect(blob)
    assert info.dtype == t.dtype and info.shape == t.shape and info.compressed_bytes == len(blob)
    assert info.raw_bytes == t.numel() * 2 and info.codec == codec


def test_chunked_container_damage():
    t = gaussian((5_000_000,), torch.float16, seed=6)
    blob = _chunked(t, "huff", 2)
    for cut in (3, 10, 60, len(blob) // 2, len(blob) - 1):
        with pytest.raises(ValueError):
            zc.decompress(blob[:cut])
    with pytest.raises(ValueError, match="trailing|truncated"):
        zc.decompress(blob + b"\0")
    for pos in (5, 9, 20, 40, len(blob) // 3, len(blob) - 200):
        bad = bytearray(blob)
        bad[pos] ^= 0x10
        with pytest.raises(ValueError):
            zc.decompress(bytes(bad))
    with pytest.raises(ValueError, match="elements"):
        zc.decompress(blob, out=torch.empty(10, dtype=torch.float16))


def test_decompressed_tensor_is_independent_of_input_buffer():
    t = gaussian((10_000,), torch.float32)
    buf = bytearray(zc.compress(t, "raw"))
    out = zc.decompress(buf)
    buf[-200:] = b"\xff" * 200  # mutate the buffer afterwards
    assert_bit_equal(out, t)


# --------------------------------------------------------------- errors


def test_argument_errors():
    t = gaussian((100,), torch.float32)
    with pytest.raises(ValueError, match="unknown codec"):
        zc.compress(t, "lz4")
    with pytest.raises(TypeError):
        zc.compress(t, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="torch.Tensor"):
        zc.compress([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="complex"):
        zc.compress(torch.zeros(4, dtype=torch.complex64))
    with pytest.raises(ValueError, match="unsupported dtype"):
        zc.compress(torch.zeros(4, dtype=torch.uint16))
    with pytest.raises(ValueError, match="meta"):
        zc.compress(torch.empty(4, device="meta"))
    with pytest.raises(ValueError, match="strided"):
        zc.compress(torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="unknown codec"):
        zc.estimate_ratio(t, "zstd")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_is_rejected():
    with pytest.raises(ValueError, match="CPU"):
        zc.compress(torch.zeros(4, device="cuda"))


CORRUPTION_CASES = [(torch.bfloat16, "zip3"), (torch.bfloat16, "huff"), (torch.float32, "zip3"),
                    (torch.float32, "huff"), (torch.float16, "huff"), (torch.float16, "zip3"),
                    (torch.float8_e4m3fn, "zip3"), (torch.float8_e5m2, "huff"), (torch.bfloat16, "raw"),
                    (torch.int32, "auto")]


def _corruption_input(dtype: torch.dtype, codec: str) -> tuple[torch.Tensor, bytes]:
    x = gaussian((3, 700), torch.float32, seed=8)
    x.view(-1)[::97] *= 1000  # outliers, so the dynamic parts hold escapes
    t = x.to(dtype) if dtype.is_floating_point else (x * 1000).round().to(dtype)
    return t, zc.compress(t, codec)


@pytest.mark.parametrize("dtype,codec", CORRUPTION_CASES, ids=str)
def test_every_single_byte_corruption_raises(dtype, codec):
    """Flipping any one byte of a container (headers, index, static and
    dynamic parts, padding) must raise ValueError, never return a wrong
    tensor.

    One documented exception: the block CRCs cover the decoded data, not the
    coded bytes (docs/FORMAT.md 2.1), so a flip inside a huff table that only
    changes the code length of a symbol the block does not use (a different
    but valid table, coding the same symbols the same way) decodes to the
    very same tensor. That is accepted (it is not a wrong tensor) as long as
    it stays such a rare, table-only case."""
    tensor, blob = _corruption_input(dtype, codec)
    assert_bit_equal(zc.decompress(blob), tensor)
    benign = []
    for i in range(len(blob)):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(blob)
            bad[i] ^= flip
            try:
                out = zc.decompress(bad)
            except ValueError:
                continue
            assert_bit_equal(out, tensor)  # never a wrong tensor
            benign.append(i)
    if codec != "huff" or not dtype.is_floating_point:
        assert not benign, f"undetected flips at {benign}"
    else:
        assert len(benign) <= 16, f"{len(benign)} undetected flips at {benign}"
        assert max(benign) - min(benign) < 64, benign  # all within one table


@pytest.mark.parametrize("dtype,codec", CORRUPTION_CASES[:4], ids=str)
def test_truncation_and_trailing_bytes_raise(dtype, codec):
    _tensor, blob = _corruption_input(dtype, codec)
    for n in range(len(blob)):
        with pytest.raises(ValueError):
            zc.decompress(blob[:n])
        with pytest.raises(ValueError):
            zc.inspect(blob[:n])
    for extra in (b"\x00", b"\x00" * 128, b"junk"):
        with pytest.raises(ValueError, match="after the frame"):
            zc.decompress(blob + extra)


def test_corruption_of_large_tensor_raises_with_codec_message():
    t = gaussian((300_000,), torch.bfloat16, seed=9)
    for codec in ("zip3", "huff", "raw"):
        blob = zc.compress(t, codec)
        g = torch.Generator().manual_seed(10)
        hdr = 12 + 8 + 32
        for pos in torch.randint(hdr, len(blob), (40,), generator=g).tolist():
            bad = bytearray(blob)
            bad[pos] ^= 0x10
            with pytest.raises(ValueError, match="codec:"):
                zc.decompress(bad)
        bad = bytearray(blob)
        bad[0] = ord("X")
        with pytest.raises(ValueError, match="magic"):
            zc.decompress(bad)
        with pytest.raises(ValueError, match="truncated"):
            zc.decompress(blob[: len(blob) // 2])


def test_garbage_inputs_raise():
    g = torch.Generator().manual_seed(11)
    for n in (0, 1, 11, 12, 50, 1000):
        junk = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).numpy().tobytes()
        with pytest.raises(ValueError):
            zc.decompress(junk)
        with pytest.raises(ValueError):
            zc.decompress(b"ZCCT" + junk)


# --------------------------------------------------------------- ratios


def test_ratio_goals_gaussian_bf16():
    """N(0, 0.02^2) bf16, 1M elements: zip3 >= 1.40x, huff >= 1.48x."""
    t = gaussian((1 << 20,), torch.bfloat16, sigma=0.02, seed=12)
    raw = t.numel() * 2
    z = raw / len(zc.compress(t, "zip3"))
    h = raw / len(zc.compress(t, "huff"))
    assert z >= 1.40, z
    assert h >= 1.48, h
    # the estimates are close to the truth
    assert abs(zc.estimate_ratio(t, "zip3") - z) / z < 0.03
    assert abs(zc.estimate_ratio(t, "huff") - h) / h < 0.03
    assert zc.estimate_ratio(t, "raw") <= 1.0
    # huff2 and auto (which picks huff2 here) are estimated too, not as raw
    for c in ("huff2", "auto"):
        r = zc.inspect(zc.compress(t, c)).ratio
        assert abs(zc.estimate_ratio(t, c) - r) / r < 0.03, (c, zc.estimate_ratio(t, c), r)


def test_estimate_ratio_other_inputs():
    assert zc.estimate_ratio(torch.arange(1000), "huff") <= 1.0  # uncoded dtype
    assert zc.estimate_ratio(random_bits((100_000,), torch.bfloat16), "auto") <= 1.01
    assert 0 < zc.estimate_ratio(torch.zeros(0, dtype=torch.bfloat16)) <= 1.0
    assert zc.estimate_ratio(gaussian((4, 5000), torch.float32).t()) > 1.1  # non-contiguous


# --------------------------------------------------------------- process


def test_no_process_group_started():
    import torch.distributed as dist

    zc.decompress(zc.compress(gaussian((1000,), torch.bfloat16)))
    assert not (dist.is_available() and dist.is_initialized())


def test_concurrent_threads():
    tensors = [gaussian((200_000,), dt, seed=i) for i, dt in
               enumerate([torch.bfloat16, torch.float32, torch.float16, torch.bfloat16] * 2)]
    errors: list[BaseException] = []

    def work(t: torch.Tensor, codec: str) -> None:
        try:
            for _ in range(3):
                assert_bit_equal(zc.decompress(zc.compress(t, codec)), t)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t, CODECS[i % 4])) for i, t in enumerate(tensors)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_gil_released_for_large_tensors():
    """Another Python thread keeps running while a large tensor is coded."""
    t = gaussian((24 << 20,), torch.bfloat16, seed=13)  # 48 MiB
    blob = zc.compress(t, "huff")
    for call in (lambda: zc.compress(t, "huff"), lambda: zc.decompress(blob)):
        inside = threading.Event()
        done = threading.Event()

        def worker() -> None:
            inside.set()
            call()
            done.set()

        th = threading.Thread(target=worker)
        th.start()
        inside.wait()
        spins = 0
        while not done.is_set():
            spins += 1
        th.join()
        # With the GIL held for the whole call this loop would get a few
        # switch intervals at most; released, it spins all along.
        assert spins > 10_000, spins


# --------------------------------------------------------------- bench CLI


def _run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(zc.__file__)))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "zipccl", "bench", "codec", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


QUICK = ["--data", "gaussian", "--sigmas", "0.01", "--dtypes", "bfloat16,float32", "--size-mib", "0.25",
         "--rounds", "1", "--min-time-ms", "1"]


def test_bench_codec_smoke(tmp_path):
    csv_path = tmp_path / "codec.csv"
    p = _run_cli(*QUICK, "--csv", str(csv_path))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for needle in ("memcpy", "zip3", "huff", "auto", "huff0-4x", "zstd-fastest", "entropy bound", "goals"):
        assert needle in out, out
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    names = {(r["dtype"], r["name"], r["op"]) for r in rows}
    for dt in ("bfloat16", "float32"):
        for want in [("memcpy", "copy"), ("zip3", "encode"), ("zip3", "decode"), ("huff", "decode"),
                     ("huff0-4x", "encode"), ("zstd-fastest", "decode"), ("entropy", "bound")]:
            assert (dt, *want) in names, (dt, want)
    assert not any(r["error"] for r in rows)


def test_bench_codec_api_rows():
    """The Python API rows (issue 28): zipccl's codecs, and ZipNN's when it
    is installed, each decoded bit for bit."""
    from zipccl.bench import codec_api

    p = _run_cli(*QUICK, "--dtypes", "bfloat16", "--codecs", "zip3,huff,auto", "--skip-external",
                 "--api-data", "gaussian", "--api-rounds", "2", "--zipnn-threads", "1", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(p.stdout)["datasets"][0]["api_rows"]
    labels = [r["label"] for r in rows]
    assert labels[:3] == ["zipccl zip3", "zipccl huff", "zipccl auto"], labels
    assert rows[2]["threads"] == "1"
    if codec_api.zipnn_module() is not None:
        assert "ZipNN" in labels
    for r in rows:
        assert not r["error"], r
        assert r["ratio"] > 1.3 and r["enc_gbps"] > 0 and r["dec_gbps"] > 0, r


def test_bench_codec_json():
    p = _run_cli(*QUICK, "--dtypes", "float16", "--codecs", "zip3,huff", "--skip-external", "--json",
                 "--api-data", "none")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert len(doc["datasets"]) == 1
    ds = doc["datasets"][0]
    assert ds["dtype"] == "float16" and ds["group"] == "gaussian"
    names = {r["name"] for r in ds["rows"]}
    assert {"memcpy", "zip3", "huff", "entropy"} <= names
    assert not names & {"huff0-4x", "zstd-fastest", "raw", "auto"}
    for r in ds["rows"]:
        if r["name"] in ("zip3", "huff"):
            assert r["ratio"] > 1.05 and r["gbps"] > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_huff2_writes_packed_frames(dtype):
    """compress writes huff2 as packed frames (docs/FORMAT.md 4b: kind 4,
    4-byte index entries, 16-bit stream lengths, no padding), smaller than
    the aligned huff2 frame (kind 3) by the index's 12 zero bytes a block at
    least; containers with an aligned frame, which compress wrote before,
    still decode and read as huff2."""
    t = gaussian((5 * 65536 + 999,), dtype, seed=9)
    packed = zc.compress(t, "huff2", threads=1)
    aligned, used = zc._C()._codec_encode(t, 3, 1)  # ZC_CODEC_HUFF2: the aligned layout
    assert used == 3
    f = packed.find(b"ZCCF")
    assert packed[f + 5] == 4 and aligned[aligned.find(b"ZCCF") + 5] == 3
    dyn = struct.unpack_from("<Q", packed, f + 16)[0]
    assert len(packed) - f - 32 - dyn == 4 * 6  # the index: one CRC per block
    assert len(packed) <= len(aligned) - 12 * 6, (len(packed), len(aligned))
    for blob in (packed, aligned):
        assert zc.inspect(blob).codec == "huff2"
        for threads in (1, 2):
            assert_bit_equal(zc.decompress(blob, threads=threads), t)
    # every byte of a packed frame counts: a flip anywhere is caught
    for i in range(f, len(packed), max(1, len(packed) // 300)):
        bad = bytearray(packed)
        bad[i] ^= 0x01
        with pytest.raises(ValueError):
            zc.decompress(bytes(bad))


def test_huff2_codes_the_bytes_under_the_exponent():
    """float32 holding float16 values (13 low mantissa bits zero, as in the
    rows of a checkpoint that never left float16): huff2 codes the two low
    byte planes, huff keeps them raw; both round-trip bit-exactly."""
    t = gaussian((200_000,), torch.float32, seed=8)
    t = (bits(t) & ~0x1FFF).view(torch.float32)
    r_huff = zc.inspect(roundtrip(t, "huff")).ratio
    r_huff2 = zc.inspect(roundtrip(t, "huff2")).ratio
    assert r_huff2 > 1.5 * r_huff, (r_huff, r_huff2)
    assert abs(zc.estimate_ratio(t, "huff2") - r_huff2) / r_huff2 < 0.03, (zc.estimate_ratio(t, "huff2"), r_huff2)
