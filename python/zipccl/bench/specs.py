"""What each benchmarked collective means, shared by the parent and the ranks.

Sizes follow nccl-tests: the "size" of all_gather is its output, of
reduce_scatter its input, of all_to_all one rank's buffer, of the others the
buffer. Bus bandwidth is algbw times the factor nccl-tests uses, which makes
numbers comparable across world sizes (it is what one link carries for a
bandwidth-optimal algorithm). The nominal wire traffic is what such an
algorithm sends in total, over all ranks, per call, uncompressed: the
reference a compression ratio is taken against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

DTYPES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "float64": 8,
    "double": 8,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
}

_CANONICAL = {"float": "float32", "bf16": "bfloat16", "half": "float16", "fp16": "float16", "double": "float64"}


def canonical_dtype(name: str) -> str:
    name = name.strip().lower()
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose from {', '.join(sorted(set(DTYPES) - set(_CANONICAL)))}")
    return _CANONICAL.get(name, name)


@dataclass(frozen=True)
class OpSpec:
    name: str
    redop: str  # "sum" or "none", the nccl-tests column
    reduces: bool  # results equal gloo's only within fp reordering
    divides_by_world: bool  # the size must split evenly over the ranks

    def busbw_factor(self, n: int) -> float:
        if self.name == "all_reduce":
            return 2 * (n - 1) / n
        if self.name in ("all_gather", "reduce_scatter", "all_to_all"):
            return (n - 1) / n
        return 1.0  # broadcast, send_recv

    def nominal_wire_bytes(self, size: int, n: int) -> int:
        """Total bytes sent over all ranks per call by a bandwidth-optimal
        uncompressed algorithm."""
        if n == 1:
            return 0
        if self.name == "all_reduce":
            return 2 * (n - 1) * size
        if self.name == "send_recv":
            return n * size
        return (n - 1) * size


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("all_reduce", "sum", True, False),
        OpSpec("all_gather", "none", False, True),
        OpSpec("reduce_scatter", "sum", True, True),
        OpSpec("all_to_all", "none", False, True),
        OpSpec("broadcast", "none", False, False),
        OpSpec("send_recv", "none", False, False),
    )
}


def parse_ops(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(unknown)}; choose from {', '.join(OPS)} or 'all'")
    return names


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgKMG]?)(i?[bB])?\s*$")


def parse_size(text: str) -> int:
    """'64K', '1M', '256MiB', '4096' -> bytes (K/M/G are binary, as in
    nccl-tests)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"bad size {text!r}: use e.g. 64K, 1M, 256M")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def parse_sizes(text: str, factor: int = 2) -> list[int]:
    """'64K-256M' (doubling, like nccl-tests -b/-e/-f 2), '1M,64M', or one
    size."""
    sizes: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = (parse_size(p) for p in part.split("-", 1))
            if lo <= 0 or hi < lo:
                raise ValueError(f"bad size range {part!r}")
            s = lo
            while s <= hi:
                sizes.append(s)
                s *= factor
        else:
            sizes.append(parse_size(part))
    return sorted(set(sizes))


def align_size(size: int, itemsize: int, world_size: int, spec: OpSpec) -> int:
    """The nearest size at or below ``size`` that the op can use: whole
    elements, and a multiple of the world size where the op splits its
    buffer."""
    unit = itemsize * (world_size if spec.divides_by_world else 1)
    return max(unit, size // unit * unit)


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{n:.0f} B"


class BackendSpec(NamedTuple):
    """One --backends entry: a backend name, or
    zipccl[:MODE][@PATH][+enc][+flat][+int8|+int4|+fp8] for zipccl with
    compression MODE, GPU path PATH, its pairs encrypted, the flat
    algorithms on hosts of several ranks, and a lossy policy (min_bytes 0):
    +int8 codes all_gather, reduce_scatter and all_reduce as int8; +int4
    codes reduce_scatter and all_reduce as int4 and all_gather as int8
    (ZeRO++'s pair); +fp8 codes all three as TACO's fp8 (block 256); on
    that group only. Absent parts are '' (False)."""

    name: str
    mode: str = ""
    path: str = ""
    encrypt: bool = False
    flat: bool = False
    lossy: str = ""  # "int8", "int4" or "fp8": the policy lossy_policy gives

    def lossy_policy(self) -> dict[str, str] | None:
        if not self.lossy:
            return None
        return {"all_gather": "int8" if self.lossy == "int4" else self.lossy,
                "reduce_scatter": self.lossy, "all_reduce": self.lossy}


LOSSY_FLAGS = ("int8", "int4", "fp8")


def parse_backend(entry: str) -> BackendSpec:
    """'zipccl:never@staged+enc' -> BackendSpec('zipccl', 'never', 'staged',
    True); raises ValueError for what no group could be made of."""
    rest, *flags = entry.split("+")
    rest, _, path = rest.partition("@")
    name, _, mode = rest.partition(":")
    for flag in flags:
        if flag not in ("enc", "flat") + LOSSY_FLAGS or flags.count(flag) > 1:
            raise ValueError(f"--backends: {entry!r}: the suffixes are +enc (encrypted pairs), +flat "
                             "(no hierarchical algorithms) and +int8, +int4 or +fp8 (lossy policy), once each")
    if sum(f in LOSSY_FLAGS for f in flags) > 1:
        raise ValueError(f"--backends: {entry!r}: one of +int8, +int4 and +fp8")
    if (mode or path or flags) and name != "zipccl":
        raise ValueError(f"--backends: {entry!r}: only zipccl takes a mode, a GPU path, +enc, +flat or a lossy suffix")
    if mode and mode not in ("auto", "always", "never"):
        raise ValueError(f"--backends: {entry!r}: the mode is one of auto, always, never")
    if path and path not in ("nccl", "coded", "staged", "auto"):
        raise ValueError(f"--backends: {entry!r}: the GPU path is one of nccl, coded, staged, auto")
    lossy = next((f for f in flags if f in LOSSY_FLAGS), "")
    return BackendSpec(name, mode, path, "enc" in flags, "flat" in flags, lossy)
