"""zipccl: a torch.distributed backend with compressed collectives.

    import zipccl
    torch.distributed.init_process_group("zipccl")

Importing this package only registers the backend name. The C++ extension
(zipccl._C) and the Go engine (libzipccl.so) are loaded by the first
process-group creation, or by info(), in the process that uses them.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .hosts import host_groups, host_mesh, topology

__version__ = "0.1.0"

__all__ = ["LinkModel", "Options", "__version__", "codec", "hooks", "host_groups", "host_mesh", "info", "library_path",
           "link_model", "set_lossy", "stats", "topology"]

BACKEND_NAME = "zipccl"

FORKED_MESSAGE = (
    "zipccl: this process was forked from one that had loaded zipccl; the Go "
    "runtime cannot be used in a forked child. Use the 'spawn' start method."
)

_load_lock = threading.Lock()
_loaded_pid: int | None = None


@dataclass
class Options:
    """Per-group options, given to ``init_process_group``/``new_group`` as
    ``pg_options``. They reach the Go engine as a ``"key=value;key=value"``
    string; a plain dict of the same keys works too.

    Attributes:
        compression: the group's compression mode, sent as
            ``compression=<mode>``; None keeps the engine's default.
        gpu_path: how the group moves CUDA tensors, sent as
            ``gpu_path=<path>``: ``"nccl"``, ``"coded"`` (coded on the GPU,
            moved by zipccl's own transport), ``"staged"`` (copied to host
            memory and run on the CPU path) or ``"auto"``; None keeps
            ``ZIPCCL_GPU_PATH``, else the planner's choice.
        encrypt: whether the group's pairs encrypt and authenticate every
            frame (AES-256-GCM), sent as ``encrypt=true``/``false``; None
            keeps ``ZIPCCL_ENCRYPT``. Every rank must agree. CUDA tensors of
            an encrypted group stay off NCCL, whose traffic is its own.
        lossy: the group's opt-in lossy modes per op, e.g.
            ``{"all_gather": "int8", "reduce_scatter": "int4"}`` or
            ``{"all_reduce": "fp8"}`` (see ``set_lossy``); None keeps
            ``ZIPCCL_LOSSY``, else lossless. Every rank must agree. CUDA
            tensors it codes are host-staged (coded on the CPU).
        lossy_min_bytes: the smallest tensor a lossy mode codes (default
            64 KiB); None keeps the default.
        lossy_fp8_block: fp8's block, a power of two from 32 to 1024
            (default 256); None keeps the default.
        extra: further engine options, passed through as they are.
    """

    compression: str | None = None
    gpu_path: str | None = None
    encrypt: bool | None = None
    lossy: Mapping[str, str] | None = None
    lossy_min_bytes: int | None = None
    lossy_fp8_block: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_string(self) -> str:
        items: dict[str, Any] = {}
        if self.compression is not None:
            items["compression"] = self.compression
        if self.gpu_path is not None:
            items["gpu_path"] = self.gpu_path
        if self.encrypt is not None:
            items["encrypt"] = self.encrypt
        if self.lossy is not None or self.lossy_min_bytes is not None or self.lossy_fp8_block is not None:
            items["lossy"] = _lossy_spec(self.lossy or {}, self.lossy_min_bytes, self.lossy_fp8_block)
        items.update(self.extra)
        return _encode_options(items)


LOSSY_OPS = ("all_gather", "reduce_scatter", "all_reduce")


def _lossy_spec(modes: Mapping[str, str | None], min_bytes: int | None, fp8_block: int | None = None) -> str:
    """The engine's policy string (backend/lossy): "op=mode,...,min_bytes=N,fp8_block=B"."""
    parts = []
    for op, mode in modes.items():
        if op not in LOSSY_OPS:
            raise ValueError(f"zipccl: lossy: unknown op {op!r} (want one of {', '.join(LOSSY_OPS)})")
        if mode is not None:
            parts.append(f"{op}={mode}")
    if min_bytes is not None and min_bytes < 0:
        raise ValueError(f"zipccl: lossy: min_bytes={min_bytes}: want >= 0")
    if not parts:
        return ""  # lossless: min_bytes alone changes nothing
    if min_bytes is not None:
        parts.append(f"min_bytes={int(min_bytes)}")
    if fp8_block is not None:
        parts.append(f"fp8_block={int(fp8_block)}")
    return ",".join(parts)


def _encode_options(items: Mapping[str, Any]) -> str:
    parts = []
    for key, value in items.items():
        if value is None:
            continue
        key = str(key).strip()
        if isinstance(value, bool):
            value = "true" if value else "false"
        value = str(value).strip()
        if not key or any(c in key for c in "=;") or ";" in value:
            raise ValueError(
                f"zipccl: option {key!r}={value!r}: keys must be non-empty and "
                "free of '=' and ';', values free of ';'"
            )
        parts.append(f"{key}={value}")
    return ";".join(parts)


def _options_string(pg_options: object) -> str:
    if pg_options is None:
        return ""
    if isinstance(pg_options, Options):
        return pg_options.to_string()
    if isinstance(pg_options, Mapping):
        return _encode_options(pg_options)
    raise TypeError(
        "zipccl: pg_options must be a zipccl.Options or a dict of engine "
        f"options, got {type(pg_options).__name__}"
    )


def library_path() -> str:
    """Where libzipccl.so is loaded from: $ZIPCCL_LIBRARY, else the copy
    installed inside this package."""
    return os.environ.get("ZIPCCL_LIBRARY") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "libzipccl.so"
    )


def _nccl_hint() -> str | None:
    """The libnccl that torch's CUDA wheel ships (nvidia-nccl-*), if any, for
    the engine's NCCL probe."""
    try:
        import nvidia.nccl  # type: ignore[import-not-found]
    except ImportError:
        return None
    for root in getattr(nvidia.nccl, "__path__", []):
        lib = os.path.join(root, "lib", "libnccl.so.2")
        if os.path.isfile(lib):
            return lib
    return None


def _check_not_forked() -> None:
    if _loaded_pid is not None and os.getpid() != _loaded_pid:
        raise RuntimeError(FORKED_MESSAGE)


def _runtime():
    """Imports zipccl._C and loads libzipccl.so, once per process."""
    global _loaded_pid
    _check_not_forked()
    with _load_lock:
        from . import _C

        if _loaded_pid is None:
            path = library_path()
            if not os.path.isfile(path):
                raise RuntimeError(
                    f"zipccl: {path} does not exist; build it with `pip install .` "
                    "(or `make setup`), or point ZIPCCL_LIBRARY at a libzipccl.so"
                )
            # Read by the Go runtime's copy of the environment at load.
            if "ZIPCCL_NCCL_LIB" not in os.environ:
                hint = _nccl_hint()
                if hint:
                    os.environ["ZIPCCL_NCCL_LIB"] = hint
            if "ZIPCCL_CUDA_LIB" not in os.environ:
                from ._paths import cuda_library

                kernels = cuda_library()
                if kernels:
                    os.environ["ZIPCCL_CUDA_LIB"] = kernels
            _C._load(path)
            _loaded_pid = os.getpid()
            # Destructors must not call into Go once the interpreter exits.
            atexit.register(_C._mark_exiting)
        return _C


def _create_backend(dist_opts: Any, pg_options: object) -> Any:
    """The creator torch calls (extended API) for every zipccl group."""
    options = _options_string(pg_options)
    _C = _runtime()
    timeout = dist_opts.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return _C._create_backend(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        timeout,
        str(dist_opts.group_id),
        options,
    )


def _register() -> None:
    """Registers "zipccl" with torch.distributed (idempotent). Also the
    torch.distributed.backends entry point, so init_process_group("zipccl")
    works without importing zipccl first."""
    if not dist.is_available():
        return
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            BACKEND_NAME,
            _create_backend,
            extended_api=True,
            devices=["cpu", "cuda"],
        )


def info() -> dict[str, Any]:
    """Versions and machine facts from the engine: zipccl_version,
    go_version, cpu {brand, features}, gpus, nccl {found, path, version}.
    Loads the engine if it is not loaded yet."""
    return json.loads(_runtime()._info())


def _zipccl_backend(group: Any) -> Any:
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    _C = _runtime()
    for device in ("cpu", "cuda"):
        try:
            backend = pg._get_backend(torch.device(device))
        except RuntimeError:
            continue
        if isinstance(backend, _C.ZipcclBackend):
            return backend
    raise RuntimeError("zipccl: the process group has no zipccl backend")


def stats(group: Any = None) -> dict[str, Any]:
    """Per-op statistics of a group's communicator (the default group when
    group is None): ``{"rank", "size", "group", "auth_key", "encrypted",
    "lossy", "ops": {op: {...}}}`` (``auth_key``: the pairs authenticate with a
    pre-shared key, never the key itself; ``encrypted``: they encrypt) where
    each op has ``count``, ``errors``, ``raw_bytes`` (the payload),
    ``wire_bytes`` (what this rank sent), ``uncoded_bytes`` (what those
    sends stand for uncoded), ``ratio`` (uncoded_bytes / wire_bytes),
    ``seconds``, ``codec_seconds``, ``wire_seconds``, ``choices`` (the
    switcher's decisions: raw, plain, zip3, huff) and ``feedback_overrides``
    (calls its measured feedback ran another way than the cost model
    chose: uncoded, or with the other codec), and ``lossy_calls`` and
    ``lossy_bytes`` per lossy mode. ``lossy`` is the group's lossy policy
    ("lossless" unless one was set). ``link`` is the measured link
    (``link_model``)."""
    return json.loads(_runtime()._stats(_zipccl_backend(group)))


@dataclass(frozen=True)
class LinkModel:
    """A group's link as zipccl measured it: sending n bytes to a peer
    takes about ``latency_s + n / bytes_per_s`` seconds on its slowest
    link. ``local``: every link stays inside one host (memory, loopback)."""

    latency_s: float
    bytes_per_s: float
    local: bool


def link_model(group: Any = None) -> LinkModel | None:
    """The latency (α) and bandwidth (β, bytes per second) of the group's
    slowest link, as zipccl's compression switcher measured them, the same
    on every rank; for code that sizes its own messages, such as
    ``zipccl.hooks``' choice of the largest rank worth compressing. The
    group measures itself once, at its first collective the switcher could
    code (a float tensor of at least 64 KiB) under compression ``auto``
    (the default); before that, or under another mode, None."""
    link = stats(group).get("link", {})
    if not link.get("measured"):
        return None
    return LinkModel(float(link["latency_s"]), float(link["bytes_per_s"]), bool(link["local"]))


def set_lossy(group: Any = None, *, min_bytes: int | None = None, fp8_block: int | None = None,
              **modes: str | None) -> None:
    """Sets a group's opt-in lossy modes (the default group when group is
    None), for groups a framework made: ``zipccl.set_lossy(group,
    all_gather="int8")``. It applies from the group's next op on; every
    rank of the group must call it with the same modes, or the next op they
    concern fails on every rank, naming the policy. With no modes the group
    is lossless again.

    Modes: ``all_gather="int8"`` or ``"fp8"``, ``reduce_scatter`` and
    ``all_reduce`` ``"int8"``, ``"int4"`` or ``"fp8"``. int8 and int4 are
    ZeRO++'s blockwise integers (one fp32 scale per 2048 elements for
    int8, 256 for int4); fp8 is TACO's tensor-parallel coding: E4M3 codes
    of each block's Walsh-Hadamard transform, ``fp8_block`` elements a
    block (a power of two from 32 to 1024, default 256), 1 + 8/B bytes an
    element. NaN and Inf blocks travel exact; reductions sum in float32
    (all_reduce is a two-shot: each element is coded twice, and every rank
    gets the same bytes), and on hosts of several ranks code only each
    host's exact partial sum. A mode applies only to float32, bfloat16 and
    float16 tensors of at least ``min_bytes`` (default 64 KiB; the
    gathered or the reduced tensor), and reductions only to SUM and AVG;
    everything else stays exact. Modes that make no sense (int4 for
    all_gather) raise ValueError here.
    """
    spec = _lossy_spec(modes, min_bytes, fp8_block)
    try:
        _runtime()._set_lossy(_zipccl_backend(group), spec)
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def __getattr__(name: str) -> Any:
    # zipccl.codec and zipccl.hooks without an explicit import, and without
    # loading them (or the engine) at `import zipccl`.
    if name in ("codec", "hooks"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'zipccl' has no attribute {name!r}")


_register()
