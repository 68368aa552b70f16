"""Whole checkpoint files through the codec: ``python -m zipccl codec
compress IN OUT`` and ``python -m zipccl codec decompress IN OUT``.

    import zipccl.checkpoint as ck
    ck.compress_file("model.safetensors", "model.zcc")
    ck.decompress_file("model.zcc", "model.safetensors")   # the same bytes

Inputs:

* a **safetensors** file: every tensor is coded with ``zipccl.codec``; the
  file's own header (names, dtypes, shapes, offsets, ``__metadata__``) is
  kept verbatim, so decompressing gives back the very same bytes. dtypes
  the codec has no type for (U16, U32, U64, F8_E8M0, ...) are stored as
  their bytes, raw framed.
* a **torch.save** file, loaded with ``torch.load(weights_only=True)`` (no
  code from the file runs; objects it refuses are refused here too): every
  tensor found by walking dicts, lists and tuples is coded; the rest of the
  object (the nesting, the keys, ints, floats, strings, None, Parameters'
  requires_grad, meta tensors) is kept as a torch.save of the object with
  each coded tensor replaced by a meta tensor of its dtype and shape.
  Decompressing writes torch.save of the same object: tensor names, dtypes,
  shapes and bits are kept; the file's bytes are not (torch.save's zip is
  not reproducible byte for byte). Tensors that share a view (same storage,
  offset, shape, strides and dtype, e.g. tied weights) are stored once and
  share again after decompression; other storage sharing (overlapping
  slices) is not kept, and non-contiguous tensors come back contiguous.
  Sparse, quantized and other non-strided tensors are refused.

The compressed file (docs/FORMAT.md section 12) is a header, one tensor
container per tensor, a zlib-compressed JSON index and a footer with the
index's CRC. Every
container carries its own CRCs, so corrupt or truncated input raises
``ValueError`` naming the problem, and the output is written to ``OUT.tmp``,
flushed to disk and renamed to ``OUT`` only when complete (the temporary
file is removed on any failure, Ctrl-C included).
"""

from __future__ import annotations

import base64
import io
import json
import mmap
import os
import struct
import sys
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from . import codec as zc

__all__ = ["FileStats", "compress_file", "decompress_file", "configure", "run"]

MAGIC = b"ZCCK"
END_MAGIC = b"ZCCE"
VERSION = 1
HEADER_LEN = 16
FOOTER_LEN = 24
SOURCE_SAFETENSORS = 1
SOURCE_TORCH = 2
_SOURCES = {SOURCE_SAFETENSORS: "safetensors", SOURCE_TORCH: "torch"}
_MAX_INDEX = 1 << 30  # bytes of index JSON a reader inflates at most

# safetensors dtype -> torch dtype the codec takes; the others are stored as bytes.
_ST_TORCH = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
_TORCH_BY_NAME = {str(d).replace("torch.", ""): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64,
    torch.complex128, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
    torch.complex32)}


@dataclass
class FileStats:
    """What one compress_file / decompress_file call did."""

    source: str  # "safetensors" or "torch"
    tensors: int
    raw_bytes: int  # the tensors' bytes
    in_bytes: int  # the input file's size
    out_bytes: int  # the output file's size
    seconds: float
    codecs: dict[str, int] = field(default_factory=dict)  # frames written per codec (compress)

    @property
    def ratio(self) -> float:
        """Uncompressed file size over compressed file size."""
        big, small = max(self.in_bytes, self.out_bytes), min(self.in_bytes, self.out_bytes)
        return big / small if small else 0.0


# ------------------------------------------------------------------ progress


class _Progress:
    """A byte-counting progress bar on stderr: tqdm when installed, else the
    benchmarks' simple one; nothing when disabled."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar: Any = None
        if not enabled:
            return
        try:
            from tqdm import tqdm  # type: ignore[import-not-found]

            self.bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                            dynamic_ncols=True, leave=True, file=sys.stderr)
        except ImportError:
            from .bench.progress import _SimpleBar

            self.bar = _SimpleBar(total, desc)

    def update(self, n: int, label: str = "") -> None:
        if self.bar is not None:
            if label and hasattr(self.bar, "disable"):  # tqdm: redrawn by update, at its own pace
                self.bar.set_postfix_str(label[-40:], refresh=False)
            elif label:
                self.bar.set_postfix_str(label[-40:])
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------ atomic output


class _AtomicOut:
    """OUT.tmp, flushed and fsynced, renamed to OUT on success; removed on
    any failure, so an OUT that exists is complete."""

    def __init__(self, path: str, force: bool) -> None:
        self.path = path
        if os.path.exists(path) and not force:
            raise FileExistsError(f"{path} exists (use --force to replace it)")
        self.tmp = path + ".tmp"
        self.f = open(self.tmp, "wb")

    def __enter__(self) -> "_AtomicOut":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
            os.replace(self.tmp, self.path)
            try:  # the rename itself durable
                d = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
                try:
                    os.fsync(d)
                finally:
                    os.close(d)
            except OSError:
                pass
        else:
            self.f.close()
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


# ------------------------------------------------------------------ reading inputs


@dataclass
class _Item:
    """One tensor to code: its name, the tensor (a view into the input when
    possible), what the index records about it."""

    name: str
    tensor: torch.Tensor
    entry: dict[str, Any]


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n <= size - 8 and head[8:9] == b"{"


def _read_safetensors_header(mm: Any, size: int, path: str) -> tuple[bytes, dict[str, Any], int]:
    if size < 8:
        raise ValueError(f"{path}: truncated safetensors file ({size} bytes)")
    (n,) = struct.unpack("<Q", mm[:8])
    if n > size - 8:
        raise ValueError(f"{path}: truncated safetensors file: the header says {n} bytes, "
                         f"the file has {size - 8} after the length")
    raw = bytes(mm[8:8 + n])
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{path}: corrupt safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: corrupt safetensors header (not a JSON object)")
    return raw, header, 8 + n


def _safetensors_items(path: str, mm: Any, size: int) -> tuple[dict[str, Any], list[_Item]]:
    raw, header, base = _read_safetensors_header(mm, size, path)
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        try:
            dt, shape, (start, end) = e["dtype"], [int(d) for d in e["shape"]], e["data_offsets"]
            start, end = int(start), int(end)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: corrupt safetensors header entry {name!r}") from None
        if not (0 <= start <= end and base + end <= size):
            raise ValueError(f"{path}: tensor {name!r} lies outside the file (truncated?): bytes "
                             f"{start}..{end} of a data section of {size - base}")
        spans.append((start, end, name, dt, shape))
    spans.sort()
    pos = 0
    for start, end, name, *_ in spans:
        if start != pos:
            raise ValueError(f"{path}: tensor {name!r} starts at {start}, expected {pos} "
                             "(safetensors data must be contiguous)")
        pos = end
    if base + pos != size:
        raise ValueError(f"{path}: {size - base - pos} bytes after the last tensor")
    items = []
    for start, end, name, dt, shape in spans:
        n = end - start
        tdt = _ST_TORCH.get(dt)
        numel = 1
        for d in shape:
            numel *= d
        entry: dict[str, Any] = {"name": name, "dtype": dt, "shape": shape}
        data = memoryview(mm)[base + start:base + end]
        if tdt is not None and numel * torch.empty((), dtype=tdt).element_size() == n and \
                (base + start) % torch.empty((), dtype=tdt).element_size() == 0:
            t = torch.frombuffer(data, dtype=tdt, count=numel) if n else torch.empty(0, dtype=tdt)
            t = t.reshape(shape)
        else:  # no codec dtype (or odd layout): its bytes, raw framed
            t = torch.frombuffer(data, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
            entry["stored"] = "bytes"
        items.append(_Item(name, t, entry))
    return {"header": raw.decode("utf-8")}, items


def _walk(obj: Any, path: tuple[str, ...], visit: Callable[[tuple[str, ...], torch.Tensor], Any]) -> Any:
    """obj with every tensor t under dicts, lists and tuples replaced by
    visit(path, t), in a fixed order (insertion order, then index); the
    containers rebuilt with their types (an OrderedDict keeps its attributes,
    such as a state_dict's _metadata)."""
    if isinstance(obj, torch.Tensor):
        return visit(path, obj)
    if isinstance(obj, dict):
        out = OrderedDict() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            out[k] = _walk(v, path + (str(k),), visit)
        if isinstance(obj, OrderedDict) and getattr(obj, "__dict__", None):
            out.__dict__.update(obj.__dict__)
        return out
    if isinstance(obj, list):
        return [_walk(v, path + (str(i),), visit) for i, v in enumerate(obj)]
    if type(obj) is tuple:
        return tuple(_walk(v, path + (str(i),), visit) for i, v in enumerate(obj))
    return obj


def _torch_items(path: str) -> tuple[dict[str, Any], list[_Item]]:
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)  # legacy format
    except Exception as exc:  # noqa: BLE001 - any load failure is the input's
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"{path}: not a readable safetensors or torch.save file (not safetensors; "
                         f"torch.load(weights_only=True): {type(exc).__name__}: {first[:300]})") from None
    items: list[_Item] = []
    seen: dict[tuple[Any, ...], int] = {}
    names: set[str] = set()
    ordinal = [0]  # every tensor the walk meets, meta ones included

    def visit(p: tuple[str, ...], t: torch.Tensor) -> torch.Tensor:
        at = ordinal[0]
        ordinal[0] += 1
        if t.device.type == "meta":
            return t  # kept in the skeleton as it is
        if t.layout != torch.strided or t.is_quantized:
            raise ValueError(f"{path}: tensor {'.'.join(p)!r} is {t.layout}"
                             f"{' quantized' if t.is_quantized else ''}; only dense tensors are supported")
        name = ".".join(p) or "tensor"
        base, k = name, 1
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.add(name)
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        entry: dict[str, Any] = {"name": name, "dtype": str(t.dtype).replace("torch.", ""),
                                 "shape": list(t.shape), "at": at}
        if key in seen and t.numel():
            entry["same_as"] = seen[key]
        else:
            seen[key] = len(items)
            if t.dtype not in zc._DTYPE_CODES:
                entry["stored"] = "bytes"
        items.append(_Item(name, t.detach(), entry))
        meta = torch.empty(t.shape, dtype=t.dtype, device="meta")
        if isinstance(t, torch.nn.Parameter):
            meta = torch.nn.Parameter(meta, requires_grad=t.requires_grad)
        return meta

    skeleton = _walk(obj, (), visit)
    buf = io.BytesIO()
    torch.save(skeleton, buf)
    return {"skeleton": base64.b64encode(buf.getvalue()).decode("ascii")}, items


def _as_coded(item: _Item) -> torch.Tensor:
    t = item.tensor
    if item.entry.get("stored") == "bytes":
        t = t.contiguous().reshape(-1)
        return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return t


# ------------------------------------------------------------------ compress


def _ordered(fn: Callable[[_Item], bytes], items: list[_Item], threads: int) -> Iterator[tuple[_Item, bytes]]:
    """fn over items in order, up to ``threads`` at a time (the codec
    releases the GIL on large tensors), holding at most threads+1 results."""
    if threads <= 1:
        for it in items:
            yield it, fn(it)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        window: list[tuple[_Item, Future[bytes]]] = []
        for it in items:
            window.append((it, pool.submit(fn, it)))
            if len(window) > threads:
                first, fut = window.pop(0)
                yield first, fut.result()
        for it, fut in window:
            yield it, fut.result()


def compress_file(src: str, dst: str, *, codec: str = "auto", threads: int = 1, force: bool = False,
                  progress: bool = True) -> FileStats:
    """Compresses a safetensors or torch.save file into ``dst`` (see the
    module docstring): up to ``threads`` tensors at once, each coded on up
    to ``threads`` threads (the bytes are the same for any value).

    Raises:
        ValueError: src is neither format, or is corrupt or truncated; a
            tensor kind is unsupported.
        FileExistsError: dst exists and force is False.
    """
    zc._kind_code(codec)  # fail on a bad name before reading anything
    t0 = time.perf_counter()
    size = os.path.getsize(src)
    with open(src, "rb") as f:
        head = f.read(16)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
    try:
        if mm is not None and _is_safetensors(head, size):
            source, (extra, items) = SOURCE_SAFETENSORS, _safetensors_items(src, mm, size)
        else:
            source, (extra, items) = SOURCE_TORCH, _torch_items(src)
        total = sum(it.tensor.numel() * it.tensor.element_size() for it in items if "same_as" not in it.entry)
        codecs: dict[str, int] = {}

        def code(it: _Item) -> bytes:
            if "same_as" in it.entry:
                return b""
            return zc.compress(_as_coded(it), codec, threads=threads)

        bar = _Progress(total, f"compress {os.path.basename(src)}", progress)
        try:
            with _AtomicOut(dst, force) as out:
                out.f.write(MAGIC + bytes([VERSION, source, 0, 0]) + bytes(8))
                pos = HEADER_LEN
                entries = []
                for it, blob in _ordered(code, items, threads):
                    e = dict(it.entry)
                    if "same_as" not in e:
                        e["offset"], e["length"] = pos, len(blob)
                        out.f.write(blob)
                        pos += len(blob)
                        name = zc.inspect(blob).codec
                        codecs[name] = codecs.get(name, 0) + 1
                        bar.update(it.tensor.numel() * it.tensor.element_size(), it.name)
                    entries.append(e)
                # zlib: the JSON repeats every name (about 9:1 on MiniLM's
                # 24 KB index, as much as the codec's edge over ZipNN's file)
                index = zlib.compress(json.dumps({"source": _SOURCES[source], **extra, "tensors": entries},
                                                 separators=(",", ":")).encode("utf-8"), 9)
                out.f.write(index)
                out.f.write(struct.pack("<QQI", pos, len(index), zlib.crc32(index)) + END_MAGIC)
                out_bytes = pos + len(index) + FOOTER_LEN
        finally:
            bar.close()
    finally:
        if mm is not None:
            items = []
            _close_map(mm)
    return FileStats(_SOURCES[source], len(entries), total, size, out_bytes, time.perf_counter() - t0, codecs)


# ------------------------------------------------------------------ decompress


def _read_index(path: str, mm: Any, size: int) -> tuple[int, dict[str, Any]]:
    if size < HEADER_LEN + FOOTER_LEN:
        raise ValueError(f"{path}: truncated ({size} bytes; a compressed checkpoint has at least "
                         f"{HEADER_LEN + FOOTER_LEN})")
    if mm[:4] != MAGIC:
        raise ValueError(f"{path}: not a zipccl compressed checkpoint (magic {bytes(mm[:4])!r})")
    if mm[4] != VERSION:
        raise ValueError(f"{path}: unsupported version {mm[4]} (this zipccl reads {VERSION})")
    source = mm[5]
    if source not in _SOURCES or mm[6:HEADER_LEN] != bytes(HEADER_LEN - 6):
        raise ValueError(f"{path}: corrupt file header")
    off, n, crc = struct.unpack("<QQI", mm[size - FOOTER_LEN:size - 4])
    if mm[size - 4:size] != END_MAGIC:
        raise ValueError(f"{path}: truncated or corrupt: no end marker (the file was cut short, "
                         "or is still being written)")
    if off < HEADER_LEN or off + n + FOOTER_LEN != size:
        raise ValueError(f"{path}: corrupt footer (index at {off}, {n} bytes, in a file of {size})")
    raw = bytes(mm[off:off + n])
    if zlib.crc32(raw) != crc:
        raise ValueError(f"{path}: corrupt index (CRC-32 {zlib.crc32(raw):08x}, want {crc:08x})")
    try:
        z = zlib.decompressobj()
        text = z.decompress(raw, _MAX_INDEX)
        if z.unconsumed_tail or not z.eof:
            raise ValueError("longer than the limit or cut short")
        index = json.loads(text)
    except (zlib.error, ValueError) as exc:
        raise ValueError(f"{path}: corrupt index ({exc})") from None
    if not isinstance(index, dict):
        raise ValueError(f"{path}: corrupt index (not a JSON object)")
    if index.get("source") != _SOURCES[source]:
        raise ValueError(f"{path}: corrupt index (source {index.get('source')!r})")
    pos = HEADER_LEN
    tensors = index.get("tensors")
    if not isinstance(tensors, list):
        raise ValueError(f"{path}: corrupt index (no tensor list)")
    for i, e in enumerate(tensors):
        if "same_as" in e:
            if not (isinstance(e["same_as"], int) and 0 <= e["same_as"] < i and "same_as" not in tensors[e["same_as"]]):
                raise ValueError(f"{path}: corrupt index entry {e.get('name')!r}")
            continue
        if e.get("offset") != pos or not isinstance(e.get("length"), int) or e["length"] < 0:
            raise ValueError(f"{path}: corrupt index entry {e.get('name')!r}")
        pos += e["length"]
    if pos != off:
        raise ValueError(f"{path}: corrupt index ({off - pos} bytes unaccounted for)")
    return source, index


def _decode_entry(path: str, mm: Any, e: dict[str, Any], out: torch.Tensor | None = None,
                  threads: int | None = None) -> torch.Tensor:
    """The entry's tensor as coded (bytes entries as uint8), checked against
    the index's dtype and shape."""
    blob = memoryview(mm)[e["offset"]:e["offset"] + e["length"]]
    try:
        t = zc.decompress(blob, out=out, threads=threads)
    except ValueError as exc:
        raise ValueError(f"{path}: tensor {e['name']!r}: {exc}") from None
    finally:
        del blob
    return t


def _st_nbytes(e: dict[str, Any]) -> int:
    start, end = e["data_offsets"]
    return int(end) - int(start)


def decompress_file(src: str, dst: str, *, threads: int | None = None, force: bool = False,
                    progress: bool = True) -> FileStats:
    """Restores the file compress_file made: the same bytes for a
    safetensors source, torch.save of the same object for a torch one.
    Each tensor is decoded on up to ``threads`` threads (None: one per CPU).

    Raises:
        ValueError: src is not a compressed checkpoint, or is corrupt or
            truncated (dst is then not created).
        FileExistsError: dst exists and force is False.
    """
    t0 = time.perf_counter()
    size = os.path.getsize(src)
    with open(src, "rb") as f:
        if size == 0:
            raise ValueError(f"{src}: empty file")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        source, index = _read_index(src, mm, size)
        entries = index["tensors"]
        total = sum(int(e.get("length", 0)) for e in entries)
        bar = _Progress(total, f"decompress {os.path.basename(src)}", progress)
        try:
            with _AtomicOut(dst, force) as out:
                if source == SOURCE_SAFETENSORS:
                    raw = _write_safetensors(src, mm, index, out, bar, threads)
                else:
                    raw = _write_torch(src, mm, index, out, bar, threads)
                out.f.flush()
                out_bytes = out.f.tell()
        finally:
            bar.close()
    finally:
        _close_map(mm)
    return FileStats(_SOURCES[source], len(entries), raw, size, out_bytes, time.perf_counter() - t0)


def _close_map(mm: Any) -> None:
    try:
        mm.close()
    except BufferError:
        pass  # a view is still alive (an exception's traceback holds it): unmapped when it goes


def _write_safetensors(src: str, mm: Any, index: dict[str, Any], out: _AtomicOut, bar: _Progress,
                       threads: int | None) -> int:
    header_text = index.get("header")
    if not isinstance(header_text, str):
        raise ValueError(f"{src}: corrupt index (no safetensors header)")
    raw = header_text.encode("utf-8")
    header = json.loads(raw)
    by_name = {e["name"]: e for e in index["tensors"]}
    spans = sorted((int(h["data_offsets"][0]), name) for name, h in header.items() if name != "__metadata__")
    if sorted(by_name) != sorted(n for _, n in spans):
        raise ValueError(f"{src}: corrupt index (its tensors differ from the safetensors header's)")
    out.f.write(struct.pack("<Q", len(raw)) + raw)
    # One reused buffer: no page faults for each tensor, no copy to write it.
    buf = bytearray(max((_st_nbytes(header[n]) for _, n in spans), default=0))
    total = 0
    for _, name in spans:
        e, h = by_name[name], header[name]
        n = _st_nbytes(h)
        info = _checked_info(src, mm, e)
        if info.raw_bytes != n:
            raise ValueError(f"{src}: tensor {name!r} decodes to {info.raw_bytes} bytes, the header says {n}")
        if n:
            view = torch.frombuffer(buf, dtype=info.dtype, count=n // info.dtype.itemsize)
            _decode_entry(src, mm, e, out=view, threads=threads)
            del view
            out.f.write(memoryview(buf)[:n])
        total += n
        bar.update(e["length"], name)
    return total


def _checked_info(src: str, mm: Any, e: dict[str, Any]) -> zc.ContainerInfo:
    try:
        return zc.inspect(memoryview(mm)[e["offset"]:e["offset"] + e["length"]])
    except ValueError as exc:
        raise ValueError(f"{src}: tensor {e['name']!r}: {exc}") from None


def _write_torch(src: str, mm: Any, index: dict[str, Any], out: _AtomicOut, bar: _Progress,
                 threads: int | None) -> int:
    try:
        skeleton = torch.load(io.BytesIO(base64.b64decode(index["skeleton"])), weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{src}: corrupt index (object skeleton: {type(exc).__name__})") from None
    entries = index["tensors"]
    decoded: list[torch.Tensor] = []
    total = 0
    for e in entries:
        if "same_as" in e:
            decoded.append(decoded[e["same_as"]])
            continue
        t = _decode_entry(src, mm, e, threads=threads)
        dt = _TORCH_BY_NAME.get(e.get("dtype", ""))
        if dt is None:
            raise ValueError(f"{src}: tensor {e['name']!r}: unknown dtype {e.get('dtype')!r}")
        if e.get("stored") == "bytes":
            t = t.view(dt) if t.numel() else torch.empty(0, dtype=dt)
        if t.dtype != dt or t.numel() != _numel(e["shape"]):
            raise ValueError(f"{src}: tensor {e['name']!r} decodes to {t.dtype} {tuple(t.shape)}, "
                             f"the index says {e['dtype']} {e['shape']}")
        decoded.append(t.reshape(e["shape"]))
        total += t.numel() * t.element_size()
        bar.update(e["length"], e["name"])
    by_at = {e.get("at"): t for e, t in zip(entries, decoded)}
    if len(by_at) != len(entries) or not all(isinstance(a, int) for a in by_at):
        raise ValueError(f"{src}: corrupt index (tensor positions)")
    ordinal = [0]
    used = [0]

    def fill(_p: tuple[str, ...], m: torch.Tensor) -> torch.Tensor:
        at = ordinal[0]
        ordinal[0] += 1
        t = by_at.get(at)
        if t is None:
            return m  # a meta tensor of the original object
        if m.device.type != "meta" or m.dtype != t.dtype or tuple(m.shape) != tuple(t.shape):
            raise ValueError(f"{src}: corrupt index (tensor {at} does not match the object)")
        used[0] += 1
        if isinstance(m, torch.nn.Parameter):
            return torch.nn.Parameter(t, requires_grad=m.requires_grad)
        return t

    obj = _walk(skeleton, (), fill)
    if used[0] != len(entries):
        raise ValueError(f"{src}: corrupt index ({len(entries)} tensors listed, {used[0]} in the object)")
    torch.save(obj, out.f)
    return total


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# ------------------------------------------------------------------ CLI


def configure(p: Any) -> None:
    """Adds ``compress`` and ``decompress`` to the ``codec`` subcommand."""
    sub = p.add_subparsers(dest="codec_command", metavar="ACTION", required=True)
    c = sub.add_parser("compress", help="compress a safetensors or torch.save file")
    c.add_argument("input", metavar="IN")
    c.add_argument("output", metavar="OUT")
    c.add_argument("--codec", default="auto", help="zipccl.codec codec for every tensor (default auto)")
    c.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1),
                   help="tensors coded at once, each on up to that many threads (default min(4, CPUs); "
                        "the output is the same for any value)")
    d = sub.add_parser("decompress", help="restore a file made by `codec compress`")
    d.add_argument("input", metavar="IN")
    d.add_argument("output", metavar="OUT")
    d.add_argument("--threads", type=int, default=None, help="threads decoding each tensor (default: one per CPU)")
    for q in (c, d):
        q.add_argument("--force", action="store_true", help="replace OUT when it exists")
        q.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def run(args: Any) -> int:
    """Runs one CLI action; 0 on success, 1 with a message on stderr."""
    try:
        if args.codec_command == "compress":
            st = compress_file(args.input, args.output, codec=args.codec, threads=args.threads,
                               force=args.force, progress=not args.quiet)
            what = ", ".join(f"{n} {k}" for k, n in sorted(st.codecs.items()))
            msg = (f"{args.input} ({st.source}, {st.tensors} tensors, {st.in_bytes} bytes) -> {args.output} "
                   f"({st.out_bytes} bytes, ratio {st.ratio:.4f}; frames: {what or 'none'}) in {st.seconds:.2f} s")
        else:
            st = decompress_file(args.input, args.output, threads=args.threads, force=args.force,
                                 progress=not args.quiet)
            msg = (f"{args.input} -> {args.output} ({st.source}, {st.tensors} tensors, {st.out_bytes} bytes) "
                   f"in {st.seconds:.2f} s")
    except (ValueError, OSError) as exc:
        print(f"zipccl codec {args.codec_command}: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(msg)
    return 0
