"""Lossless tensor compression with zipccl's codec, without any process group.

    import zipccl.codec

    blob = zipccl.codec.compress(weight, codec="auto")   # bytes
    same = zipccl.codec.decompress(blob)                 # bit-identical tensor

The bytes are the codec's tensor container (docs/FORMAT.md, section 7): the
dtype, the shape, then one frame of the Go codec (backend/codec), whose
blocks each carry a CRC-32C of the original bytes. Decoding checks
everything, so damaged or truncated data raises ``ValueError`` instead of
returning a wrong tensor.

Codecs:

* ``"zip3"``: ZipCCL's fixed 3-bit exponent code; the fastest.
* ``"huff"``: per-block Huffman-coded exponents.
* ``"huff2"``: Huffman-codes the exponent and, where that saves 5 %, each
  byte under it (docs/FORMAT.md 4a), in a packed frame without alignment
  padding (4b); the best ratio, encodes and decodes at about huff's speed.
  CPU only: collectives never use it. Containers written before the packed
  frame existed (aligned huff2 frames) still decode, and read as "huff2".
* ``"raw"``: the bytes as they are, with the same framing and CRCs.
* ``"auto"``: the best ratio: huff2, or on a small tensor whichever kind
  codes it smallest; see "auto here and in collectives" below.

bfloat16, float16, float32, float8_e4m3fn and float8_e5m2 are coded; every
other supported dtype (float64, integers, bool) is stored raw whatever codec
is asked for. Any output is at most the raw size plus a small header
(the encoder falls back to raw rather than expand the data).

auto here and in collectives: the Python API is for checkpoints and
storage, where bytes saved outlast the time spent, so its auto takes the
best ratio among the coding kinds, every one of which encodes faster than
ZipNN 0.5.4 on one thread (benchmarks/RESULTS.md). A tensor of up to 65536
elements is encoded with every kind and the smallest output kept; a larger
one is coded huff2, which was the smallest on every tensor tried (its
per-block tables code the exponent in no more bits than zip3's or huff's
codes, and its packed frame is smaller than raw's even where nothing
codes; ``_auto_pick``). Inside
collectives the adaptive switcher keeps the Go codec's own auto
(``ChooseKind``: a 4096-element estimate that prefers zip3 within 3% of
huff's ratio), because there the coding time is on the critical path and
the link speed decides what pays (docs/ARCHITECTURE.md).

Threads: ``compress`` and ``decompress`` code one frame on up to one
thread per CPU by default (``threads=N`` for N, ``threads=1`` for one). The
Huffman coders start a fresh table every 2^22 elements, and each encoding
thread takes a run of those segments (a tensor below 2^23 elements is
encoded on one thread, or for bfloat16 and float16 huff2 on two, one
deciding each block's tables while the other writes the previous
block's codes), each decoding thread a run of blocks of 2^18
elements or more; the bytes are the same whatever the thread count or the
machine. ``decompress`` still reads
the chunked container (docs/FORMAT.md 7a) that compress wrote for tensors
of 8 MiB or more before frames were coded on several threads.

The first call loads the engine (libzipccl.so) like ``zipccl.info()`` does;
it starts no process group and opens no socket.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Union

import torch

__all__ = [
    "CODECS",
    "CODED_DTYPES",
    "DTYPES",
    "ContainerInfo",
    "bench",
    "choose_codec",
    "compress",
    "decompress",
    "estimate_ratio",
    "inspect",
]

BytesLike = Union[bytes, bytearray, memoryview]

# Codec names and their ABI codes (ZC_CODEC_* in capi/zipccl_abi.h). huff2
# writes packed frames (ZC_CODEC_HUFF2P); aligned huff2 frames (3), which
# compress wrote before those existed, decode and are named huff2 too.
_KIND_CODES = {"raw": 0, "zip3": 1, "huff": 2, "huff2": 4, "auto": 255}
_KIND_NAMES = {code: name for name, code in _KIND_CODES.items()} | {3: "huff2"}

#: Codec names accepted by compress() and estimate_ratio().
CODECS: tuple[str, ...] = ("auto", "zip3", "huff", "huff2", "raw")

# torch dtype -> ABI dtype code (backend/dtype, ZC_* in capi/zipccl_abi.h).
_DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 1,
    torch.float64: 2,
    torch.bfloat16: 3,
    torch.float16: 4,
    torch.int8: 5,
    torch.uint8: 6,
    torch.int16: 7,
    torch.int32: 8,
    torch.int64: 9,
    torch.bool: 10,
    torch.float8_e4m3fn: 11,
    torch.float8_e5m2: 12,
}
_CODE_DTYPES = {code: dt for dt, code in _DTYPE_CODES.items()}

#: dtypes compress() accepts.
DTYPES: tuple[torch.dtype, ...] = tuple(_DTYPE_CODES)

#: dtypes whose exponents are coded (the others are always stored raw).
CODED_DTYPES: tuple[torch.dtype, ...] = (
    torch.bfloat16,
    torch.float16,
    torch.float32,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
)


def _C() -> Any:
    from . import _runtime

    return _runtime()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _kind_code(codec: str) -> int:
    if not isinstance(codec, str):
        raise TypeError(f"zipccl.codec: codec must be a str, got {type(codec).__name__}")
    code = _KIND_CODES.get(codec.strip().lower())
    if code is None:
        raise ValueError(f"zipccl.codec: unknown codec {codec!r} (want one of {', '.join(CODECS)})")
    return code


def _check_tensor(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """The tensor as the codec needs it: a dense CPU tensor of a supported
    dtype, detached. (Contiguity is made by the extension, without copying
    tensors that already are.)"""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"zipccl.codec.{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type == "meta":
        raise ValueError(f"zipccl.codec.{what}: a meta tensor has no data to compress")
    if tensor.device.type != "cpu":
        raise ValueError(
            f"zipccl.codec.{what}: the codec runs on the CPU; got a tensor on {tensor.device} "
            "(move it with tensor.cpu() first)"
        )
    if tensor.layout != torch.strided:
        raise ValueError(
            f"zipccl.codec.{what}: only dense (strided) tensors are supported, got {tensor.layout} "
            "(use tensor.to_dense())"
        )
    if tensor.dtype not in _DTYPE_CODES:
        raise ValueError(
            f"zipccl.codec.{what}: unsupported dtype {_dtype_name(tensor.dtype)} (supported: "
            + ", ".join(_dtype_name(d) for d in DTYPES)
            + ")"
        )
    return tensor.detach()


def compress(tensor: torch.Tensor, codec: str = "auto", *, threads: int | None = None) -> bytes:
    """Compresses a CPU tensor losslessly into bytes.

    Args:
        tensor: any dense CPU tensor of a supported dtype (see ``DTYPES``),
            of any shape (0-d and empty included), contiguous or not (a
            non-contiguous tensor is copied to a contiguous one first).
        codec: ``"auto"`` (default: the best ratio, huff2 but on small
            tensors; see the module docstring),
            ``"zip3"``, ``"huff"``, ``"huff2"`` or ``"raw"``.
        threads: how many threads code the tensor: None (default) one
            per CPU this process may run on, N at most N. The output is the
            same for every value.

    Returns:
        The tensor container: dtype, shape and one codec frame. Its length
        is at most the raw size plus a small header (16 bytes of index per
        65536 elements, 32 + 12 + 8*ndim bytes of headers, padding to 128).

    Raises:
        TypeError: tensor is not a tensor, codec not a str, threads not an
            int or None.
        ValueError: unknown codec; tensor on CUDA/meta, sparse, or of an
            unsupported dtype (complex, quantized, uint16, ...); threads < 1.
    """
    kind = _kind_code(codec)
    t = _check_tensor(tensor, "compress")
    n = _threads(threads, "compress")
    if kind == _KIND_CODES["auto"]:
        kind, whole = _auto_pick(t)
        if whole is not None:  # the trial encoded the whole tensor already
            return whole
    data, _used = _C()._codec_encode(t, kind, n)
    return data


def _threads(threads: int | None, what: str) -> int:
    """The thread count of a call: threads, or by default one per CPU this
    process may run on."""
    if threads is None:
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"zipccl.codec.{what}: threads must be an int or None, got {type(threads).__name__}")
    if threads < 1:
        raise ValueError(f"zipccl.codec.{what}: threads must be >= 1, got {threads}")
    return min(threads, 1 << 10)


# ---------------------------------------------------------------- chunked containers
#
# A tensor cut into chunks, each an ordinary 1-D container of its run of
# elements (docs/FORMAT.md 7a): how compress coded tensors of 8 MiB or more
# on several threads before one frame could be. Read, no longer written.

_CHUNK_MAGIC = b"ZCCM"
_CHUNK_VERSION = 1


def _parse_chunked(buf: BytesLike, what: str) -> tuple[torch.dtype, list[int], list[memoryview], int]:
    """(dtype, shape, the chunk containers, header length) of a chunked
    container, every header field and length checked."""
    mv = memoryview(buf).cast("B")
    n = len(mv)

    def need(k: int) -> None:
        if n < k:
            raise ValueError(f"zipccl.codec.{what}: truncated chunked container ({n} bytes, header needs {k})")

    need(8)
    if mv[4] != _CHUNK_VERSION or mv[7] != 0:
        raise ValueError(f"zipccl.codec.{what}: unsupported chunked container version {mv[4]}")
    dtype = _CODE_DTYPES.get(mv[5])
    ndim = mv[6]
    if dtype is None or ndim > 64:
        raise ValueError(f"zipccl.codec.{what}: corrupt chunked container header")
    need(8 + 8 * ndim + 8)
    shape = list(struct.unpack_from(f"<{ndim}q", mv, 8))
    nchunks, zero = struct.unpack_from("<II", mv, 8 + 8 * ndim)
    hl = 8 + 8 * ndim + 8 + 8 * nchunks + 4
    if zero != 0 or not 2 <= nchunks <= 1 << 20:
        raise ValueError(f"zipccl.codec.{what}: corrupt chunked container header")
    need(hl)
    (crc,) = struct.unpack_from("<I", mv, hl - 4)
    if zlib.crc32(mv[:hl - 4]) != crc:
        raise ValueError(f"zipccl.codec.{what}: chunked container header CRC mismatch (corrupt data)")
    lens = struct.unpack_from(f"<{nchunks}Q", mv, 8 + 8 * ndim + 8)
    if any(d < 0 for d in shape) or hl + sum(lens) != n:
        raise ValueError(f"zipccl.codec.{what}: chunked container of {n} bytes, its header says "
                         f"{hl + sum(lens)} (truncated or trailing data)")
    parts, off = [], hl
    for ln in lens:
        parts.append(mv[off:off + ln])
        off += ln
    return dtype, shape, parts, hl


def _decode_chunked(buf: BytesLike, out: torch.Tensor | None, threads: int) -> torch.Tensor:
    dtype, shape, parts, _ = _parse_chunked(buf, "decompress")
    C = _C()
    numel = 1
    for d in shape:
        numel *= d
    counts = []
    for p in parts:
        code, _kind, pshape, _raw, _total = C._codec_header(p)
        if _CODE_DTYPES.get(code) != dtype or len(pshape) != 1:
            raise ValueError("zipccl.codec.decompress: a chunk disagrees with the chunked container's dtype")
        counts.append(pshape[0])
    if sum(counts) != numel:
        raise ValueError(f"zipccl.codec.decompress: the chunks hold {sum(counts)} elements, the shape {numel}")
    if out is None:
        out = torch.empty(shape, dtype=dtype)
        _advise_huge_pages(out.data_ptr(), numel * out.element_size())
    elif out.dtype != dtype or out.numel() != numel:
        raise ValueError(f"zipccl.codec: out is {out.dtype} with {out.numel()} elements; the data holds "
                         f"{dtype} with {numel}")
    result = out
    flat = out.view(-1)
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    for i, part in enumerate(parts):
        C._codec_decode_into(part, flat[starts[i]:starts[i + 1]], threads)
    return result


def _advise_huge_pages(ptr: int, nbytes: int) -> None:
    """As torchext/codec.cpp does for single containers: transparent huge
    pages for a fresh output of 4 MiB or more (its first-touch page faults
    otherwise cost about as much as decoding it)."""
    if nbytes < (4 << 20) or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        lo = (ptr + (2 << 20) - 1) & ~((2 << 20) - 1)
        hi = (ptr + nbytes) & ~((2 << 20) - 1)
        if hi > lo:
            libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), 14)  # MADV_HUGEPAGE
    except (OSError, AttributeError):
        pass


# Up to this many elements auto encodes the whole tensor with raw and every
# coding kind and keeps the smallest output (well under a millisecond per
# kind).
_AUTO_WHOLE = 1 << 16


def _auto_kinds() -> list[int]:
    """The coding kinds auto tries on a small tensor, fastest first (their
    ABI codes rise with cost): every kind in _KIND_CODES but raw and auto,
    so a kind added to the table is tried as soon as it is there."""
    return sorted(c for n, c in _KIND_CODES.items() if n not in ("raw", "auto"))


def _auto_pick(t: torch.Tensor) -> tuple[int, bytes | None]:
    """(kind code, None) for auto on t; or (kind, its container) when it
    encoded the whole tensor. Uncoded dtypes and empty tensors go to the Go
    codec's auto, which frames them raw.

    A tensor of more than _AUTO_WHOLE elements is coded huff2 without a
    trial. Its tables are optimal length-limited codes of each block's own
    histogram, so they code the exponent in no more bits than zip3's fixed
    code or huff's sampled tables, and it codes the bytes under it only
    where they save; its packed frame is smaller than raw's even where
    nothing codes. On every tensor tried it was the smallest: 2 % (float32)
    to 86 % (float8 of tiny values) below zip3 on float data, 128 to 176
    bytes below it on random bits (benchmarks/results/auto-huff2/
    zip3-vs-huff2.log), and below huff (RESULTS.md o2). The trial it
    replaces (raw, zip3 and huff2 on 8 runs of the tensor) picked huff2 on
    every tensor of the codec benchmark (RESULTS.md o10) and made auto on
    the demo's float16 activations take 0.62 to 0.65 ms against huff2's
    0.55 (benchmarks/results/auto-huff2/auto-probe.log)."""
    C = _C()
    if t.dtype not in CODED_DTYPES or t.numel() == 0:
        return _KIND_CODES["auto"], None
    if t.numel() > _AUTO_WHOLE:
        return _KIND_CODES["huff2"], None
    # raw first: a coding kind must beat it (on random bits huff can write
    # a frame of raw blocks exactly as long as raw's). One thread each: the
    # tensor is small, and a thread pool over the kinds cost more than it
    # saved on 2 cores.
    best_kind = _KIND_CODES["raw"]
    best_data, _ = C._codec_encode(t, best_kind, 1)
    raw_len = len(best_data)
    for kind in _auto_kinds():
        try:
            data, used = C._codec_encode(t, kind, 1)
        except ValueError:
            continue  # a kind this dtype does not have
        # Strictly smaller than raw; a tie among coding kinds goes to the
        # later one, whose extra coding only ever saves bytes.
        if used != _KIND_CODES["raw"] and len(data) < raw_len and len(data) <= len(best_data):
            best_kind, best_data = kind, data
    return best_kind, best_data


def _as_buffer(data: BytesLike, what: str) -> BytesLike:
    if isinstance(data, (bytes, bytearray)):
        return data
    if isinstance(data, memoryview):
        return data if data.c_contiguous else data.tobytes()
    raise TypeError(
        f"zipccl.codec.{what}: expected bytes, bytearray or memoryview, got {type(data).__name__}"
    )


def decompress(data: BytesLike, *, out: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
    """Restores the tensor that :func:`compress` produced, bit for bit.

    The input is read in place (no copy of ``data``) and decoded straight
    into the output tensor's memory; a fresh output of 4 MiB or more is
    backed by transparent huge pages where the kernel offers them (on 4 KiB
    pages the first-touch page faults of a new tensor cost more than a zip3
    decode). Passing ``out`` reuses a tensor and saves those faults too.

    Args:
        data: the whole output of ``compress`` (bytes, bytearray or a
            memoryview of them); nothing may follow it.
        out: optional contiguous CPU tensor with the data's dtype and element
            count (any shape; not requiring grad) to decode into. On error
            it may hold partial output.
        threads: how many threads decode: None (default) one per CPU this
            process may run on, N at most N.

    Returns:
        A new contiguous CPU tensor with the original dtype and shape, or
        ``out`` (its shape unchanged).

    Raises:
        ValueError: the data is not a tensor container, or is truncated,
            has trailing bytes, or is corrupted (every block's CRC-32C is
            checked), with the codec's message; or ``out`` does not fit.
        TypeError: data is not a bytes-like object, out not a tensor, or
            threads not an int or None.
    """
    buf = _as_buffer(data, "decompress")
    n = _threads(threads, "decompress")
    chunked = bytes(buf[:4]) == _CHUNK_MAGIC
    if out is None:
        return _decode_chunked(buf, None, n) if chunked else _C()._codec_decode(buf, n)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"zipccl.codec.decompress: out must be a torch.Tensor, got {type(out).__name__}")
    if out.requires_grad:
        raise ValueError("zipccl.codec.decompress: out requires grad (decode into a detached tensor)")
    if chunked:
        if out.device.type != "cpu" or out.layout != torch.strided or not out.is_contiguous():
            raise ValueError("zipccl.codec: out must be a contiguous CPU tensor")
        _decode_chunked(buf, out, n)
    else:
        _C()._codec_decode_into(buf, out, n)
    # an in-place write: autograd's saved-tensor checks must see it
    torch.autograd.graph.increment_version(out)
    return out


@dataclass(frozen=True)
class ContainerInfo:
    """What a compressed tensor's headers say (nothing decoded).

    Attributes:
        dtype: the tensor's dtype.
        shape: the tensor's shape.
        codec: the frame's codec as written: "raw", "zip3" or "huff"
            ("auto" resolved; "raw" for uncoded dtypes or when coding did not
            shrink the data).
        raw_bytes: the decoded size, numel * element size.
        compressed_bytes: the container's size.
    """

    dtype: torch.dtype
    shape: torch.Size
    codec: str
    raw_bytes: int
    compressed_bytes: int

    @property
    def ratio(self) -> float:
        """raw_bytes / compressed_bytes."""
        return self.raw_bytes / self.compressed_bytes if self.compressed_bytes else 0.0


def inspect(data: BytesLike) -> ContainerInfo:
    """Reads the headers of a compressed tensor (checking their CRCs and that
    ``data`` is exactly one container long) without decoding it.

    Raises:
        ValueError: as :func:`decompress`, for damage found in the headers
            or a wrong length.
    """
    buf = _as_buffer(data, "inspect")
    if bytes(buf[:4]) == _CHUNK_MAGIC:
        dtype, shape, parts, _ = _parse_chunked(buf, "inspect")
        heads = [_C()._codec_header(p) for p in parts]
        kinds = {h[1] for h in heads}
        return ContainerInfo(
            dtype=dtype,
            shape=torch.Size(shape),
            codec=_KIND_NAMES.get(kinds.pop(), "?") if len(kinds) == 1 else "mixed",
            raw_bytes=int(sum(h[3] for h in heads)),
            compressed_bytes=len(memoryview(buf).cast("B")),
        )
    code, kind, shape, raw, total = _C()._codec_header(buf)
    dtype = _CODE_DTYPES.get(code)
    if dtype is None:
        raise ValueError(f"zipccl.codec.inspect: unknown dtype code {code}")
    return ContainerInfo(
        dtype=dtype,
        shape=torch.Size(shape),
        codec=_KIND_NAMES.get(kind, f"kind{kind}"),
        raw_bytes=int(raw),
        compressed_bytes=int(total),
    )


def estimate_ratio(tensor: torch.Tensor, codec: str = "zip3") -> float:
    """A cheap estimate (from a sample of at most 4096 elements) of the ratio
    ``raw size / compressed size`` that ``compress(tensor, codec)`` reaches.

    Uncoded dtypes (and ``"raw"``) estimate the raw frame, slightly below 1.
    ``"auto"`` estimates the codec :func:`choose_codec` names. A
    non-contiguous tensor is copied first.

    Raises:
        the same errors as :func:`compress` for bad arguments.
    """
    kind = _kind_code(codec)
    t = _check_tensor(tensor, "estimate_ratio")
    if kind == _KIND_CODES["auto"]:
        kind, _ = _auto_pick(t)
    ratio, _chosen = _C()._codec_estimate(t, kind)
    return float(ratio)


def choose_codec(tensor: torch.Tensor) -> str:
    """The codec ``compress(tensor, "auto")`` writes: "huff2" for a coded
    dtype above 65536 elements; for a smaller tensor the coding kind with
    the smallest output, or "raw" when none shrinks it (a trial encode with
    each kind); "raw" for uncoded dtypes and empty tensors."""
    t = _check_tensor(tensor, "choose_codec")
    kind, _ = _auto_pick(t)
    if kind == _KIND_CODES["auto"]:
        return "raw"
    return _KIND_NAMES.get(kind, f"kind{kind}")


def bench(
    tensor: torch.Tensor,
    *,
    codecs: tuple[str, ...] | list[str] = ("raw", "zip3", "huff", "auto"),
    rounds: int = 5,
    min_time_ms: float = 50.0,
    skip_external: bool = False,
) -> list[dict[str, Any]]:
    """Runs the Go codec benchmark (backend/codec/codecbench) on one tensor:
    a same-size memcpy, encode and decode of each codec, klauspost huff0 on
    the exponent symbols and zstd on the raw bytes, all in the same run on
    the same data, single-threaded. Returns its rows (dicts with name, op,
    dtype, kind, bytes, encoded_bytes, ratio, gbps, cpu_gbps, vs_memcpy,
    vs_memcpy_cpu, bits, error, note). Used by ``python -m zipccl bench
    codec``. The GIL is released while it runs. huff2 is measured as
    compress writes it, packed: its rows' kind says huff2p."""
    t = _check_tensor(tensor, "bench")
    for c in codecs:
        _kind_code(c)
    names = [c.strip().lower() for c in codecs]
    options = {
        "kinds": ["huff2p" if c == "huff2" else c for c in names],
        "rounds": int(rounds),
        "min_time_ms": float(min_time_ms),
        "skip_external": bool(skip_external),
    }
    rows = json.loads(_C()._codec_bench(t, json.dumps(options)))
    for r in rows:
        if r.get("name") == "huff2p":
            r["name"] = "huff2"
    return rows
