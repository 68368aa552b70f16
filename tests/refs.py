"""Inputs and reference results for the op matrix.

Every rank regenerates every rank's input from (seed, rank), so each rank
can compute the expected result of a collective locally, in Python, from
the same inputs. Two kinds of inputs:

* "exact": values for which the result is exact whatever the reduction
  order (integer-valued floats small enough that every partial sum is
  representable, products of powers of two, any integers since integer
  arithmetic wraps). Results are compared bit for bit.
* "random": random floats; results are compared within a bound on the
  rounding error of any summation order, and against gloo.

Reference semantics (those of the engine, see backend/reduce):
integers wrap; AVG on integers divides the wrapped sum truncating toward
zero; bool SUM/MAX/BOR = OR, PRODUCT/MIN/BAND = AND, BXOR = XOR; float16,
bfloat16 and float8 values are combined in float32 and rounded, so an exact
float64 result rounded to the dtype is what a correct engine must produce;
AVG divides in float64 for float64 and in float32 for the other floats;
PREMUL_SUM multiplies each input by the factor, then sums.
"""

from __future__ import annotations

import hashlib
import math
import zlib

import torch
import torch.distributed as dist

F8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FLOATS = (torch.float64, torch.float32, torch.bfloat16, torch.float16) + F8
INTS = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
DTYPES = FLOATS + INTS + (torch.bool,)
# The dtypes gloo can reduce (its SUM is the reordering-tolerance reference).
GLOO_FLOATS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)

REDOPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM", "PREMUL_SUM_TENSOR")

# Powers of two keep "exact" inputs exact when scaled.
EXACT_PREMUL = {"PREMUL_SUM": 2.0, "PREMUL_SUM_TENSOR": 0.5}
# Not powers of two: scaling rounds, which "random" inputs are for.
RANDOM_PREMUL = {"PREMUL_SUM": 1.0 / 3.0, "PREMUL_SUM_TENSOR": 0.7}

# Largest |x| of an "exact" summand such that any sum of up to 4 of them,
# times up to 2 (PREMUL_SUM), is an integer the dtype represents exactly:
# 4 * 2 * R <= 2**(mantissa bits + 1).
EXACT_RANGE = {
    torch.float64: 1 << 20,
    torch.float32: 1 << 20,
    torch.float16: 256,
    torch.bfloat16: 32,
    torch.float8_e4m3fn: 2,
    torch.float8_e5m2: 1,
}

# Relative spacing of the dtype (2 * unit roundoff) and its smallest
# subnormal, for error bounds.
EPS = {
    torch.float64: 2.0**-52,
    torch.float32: 2.0**-23,
    torch.bfloat16: 2.0**-7,
    torch.float16: 2.0**-10,
    torch.float8_e4m3fn: 2.0**-3,
    torch.float8_e5m2: 2.0**-2,
}
TINY = {
    torch.float64: 2.0**-1074,
    torch.float32: 2.0**-149,
    torch.bfloat16: 2.0**-133,
    torch.float16: 2.0**-24,
    torch.float8_e4m3fn: 2.0**-9,
    torch.float8_e5m2: 2.0**-16,
}


def name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def supported(dtype: torch.dtype, op: str) -> bool:
    """Whether zipccl defines reduce op `op` for dtype."""
    if dtype in FLOATS:
        return op not in ("BAND", "BOR", "BXOR")
    if dtype == torch.bool:
        return op not in ("AVG", "PREMUL_SUM", "PREMUL_SUM_TENSOR")
    return not op.startswith("PREMUL")


def premul_factor(op: str, mode: str) -> float:
    return (EXACT_PREMUL if mode == "exact" else RANDOM_PREMUL)[op]


def redop(op: str, dtype: torch.dtype, mode: str = "exact"):
    """The torch.distributed reduce op object for a name."""
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(premul_factor(op, mode))
    if op == "PREMUL_SUM_TENSOR":
        fdt = torch.float32 if dtype in F8 else dtype
        return dist._make_nccl_premul_sum(torch.tensor(premul_factor(op, mode), dtype=fdt))
    return getattr(dist.ReduceOp, op)


def generator(seed: int, rank: int, salt: str = "") -> torch.Generator:
    key = zlib.crc32(f"{seed}/{rank}/{salt}".encode())
    return torch.Generator().manual_seed(key)


def gen(seed: int, rank: int, shape, dtype: torch.dtype, op: str = "SUM", mode: str = "exact", salt: str = "") -> torch.Tensor:
    """Rank `rank`'s input for one case; the same on every process."""
    g = generator(seed, rank, salt)
    shape = tuple(shape)
    n = math.prod(shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype in INTS:
        if op == "AVG":
            lo = 0 if dtype == torch.uint8 else -30
            return torch.randint(lo, 31, shape, generator=g).to(dtype)
        # Full range, raw random bytes: wrapping included.
        size = torch.empty((), dtype=dtype).element_size()
        return torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g).view(dtype).reshape(shape)
    if mode == "exact":
        if op == "PRODUCT":
            choices = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
            return choices[torch.randint(0, len(choices), shape, generator=g)].to(dtype)
        if op in ("MIN", "MAX"):
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * 10).to(dtype)
            return torch.where(x.double() == 0, torch.ones((), dtype=torch.float64), x.double()).to(dtype)
        r = EXACT_RANGE[dtype]
        return torch.randint(-r, r + 1, shape, generator=g).to(dtype)
    # random
    if op == "PRODUCT":
        mag = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
        sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
        return (mag * sign).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _combine_int(xs, op):
    acc = xs[0].clone()
    for x in xs[1:]:
        if op in ("SUM", "AVG"):
            acc = acc + x
        elif op == "PRODUCT":
            acc = acc * x
        elif op == "MIN":
            acc = torch.minimum(acc, x)
        elif op == "MAX":
            acc = torch.maximum(acc, x)
        elif op == "BAND":
            acc = acc & x
        elif op == "BOR":
            acc = acc | x
        elif op == "BXOR":
            acc = acc ^ x
        else:
            raise AssertionError(op)
    return acc


def reduce_ref(xs: list[torch.Tensor], op: str, mode: str = "exact") -> torch.Tensor:
    """The expected result of reducing xs (one per rank) with op. For floats
    with "random" inputs this is the float64 value of the exact result (to be
    compared within error_bound); otherwise it is the exact dtype result."""
    dtype = xs[0].dtype
    n = len(xs)
    if dtype == torch.bool:
        u = [x.to(torch.uint8) for x in xs]
        if op in ("SUM", "MAX", "BOR"):
            r = _combine_int(u, "BOR")
        elif op in ("PRODUCT", "MIN", "BAND"):
            r = _combine_int(u, "BAND")
        elif op == "BXOR":
            r = _combine_int(u, "BXOR")
        else:
            raise AssertionError(op)
        return r.bool()
    if dtype in INTS:
        r = _combine_int(xs, op)
        if op == "AVG":
            r = torch.div(r, n, rounding_mode="trunc")
        return r
    v = [x.double() for x in xs]
    if op.startswith("PREMUL"):
        f = premul_factor(op, mode)
        v = [x * f for x in v]
    if op in ("SUM", "AVG") or op.startswith("PREMUL"):
        s = v[0].clone()
        for x in v[1:]:
            s = s + x
        if op == "AVG":
            if mode != "exact":
                return s / n
            if dtype == torch.float64:
                return s / n
            return (s.to(dtype).float() / n).to(dtype)
        return s if mode != "exact" else s.to(dtype)
    if op == "PRODUCT":
        p = v[0].clone()
        for x in v[1:]:
            p = p * x
        return p if mode != "exact" else p.to(dtype)
    if op == "MIN":
        return torch.stack(v).min(0).values.to(dtype)
    if op == "MAX":
        return torch.stack(v).max(0).values.to(dtype)
    raise AssertionError(op)


def error_bound(xs: list[torch.Tensor], op: str, mode: str = "random") -> torch.Tensor:
    """Elementwise bound on |result - exact| for any reduction order, with
    rounding at every step in the dtype (recursive summation: at most
    (n-1) roundings of partial sums, plus the input scaling and the final
    AVG division)."""
    dtype = xs[0].dtype
    n = len(xs)
    eps, tiny = EPS[dtype], TINY[dtype]
    v = [x.double().abs() for x in xs]
    if op.startswith("PREMUL"):
        f = abs(premul_factor(op, mode))
        v = [x * f for x in v]
    if op == "PRODUCT":
        mag = v[0].clone()
        for x in v[1:]:
            mag = mag * x
        return (n + 1) * eps * mag + (n + 1) * tiny
    s = v[0].clone()
    for x in v[1:]:
        s = s + x
    if op == "AVG":
        s = s / n
    return (n + 2) * eps * s + (n + 2) * tiny


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes (for bit-exact comparisons)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(bits(a), bits(b))


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(bits(t).numpy().tobytes()).hexdigest()[:16]


def describe_diff(got: torch.Tensor, want: torch.Tensor) -> str:
    """A short description of where two tensors differ."""
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return f"got {got.dtype}{tuple(got.shape)}, want {want.dtype}{tuple(want.shape)}"
    g, w = bits(got), bits(want)
    es = got.element_size()
    bad = (g != w).nonzero()
    if bad.numel() == 0:
        return "equal"
    first = int(bad[0]) // es
    gf = got.reshape(-1)[first]
    wf = want.reshape(-1)[first]
    count = int((g.view(-1, es) != w.view(-1, es)).any(1).sum()) if es > 1 else int(bad.numel())
    if got.dtype in F8:
        gf, wf = gf.float(), wf.float()
    return f"{count} of {got.numel()} elements differ; first at flat index {first}: got {gf.item()!r}, want {wf.item()!r}"


def check_exact(failures: list, what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if not same_bits(got, want):
        failures.append(f"{what}: {describe_diff(got, want)}")


def check_close(failures: list, what: str, got: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor) -> None:
    """got (in its dtype) within bound of exact (float64)."""
    diff = (got.double() - exact).abs()
    bad = ~(diff <= bound)
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0])
        failures.append(
            f"{what}: {int(bad.sum())} of {got.numel()} elements off; first at {i}: got "
            f"{got.reshape(-1)[i].double().item()!r}, exact {exact.reshape(-1)[i].item()!r}, "
            f"bound {bound.reshape(-1)[i].item()!r}"
        )


def guard(failures: list, what: str, fn):
    """Runs fn(); an exception becomes a recorded failure (so that one
    rank's error never leaves the others waiting in the next collective)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - recorded, reported by the parent
        failures.append(f"{what}: raised {type(e).__name__}: {str(e)[:300]}")
        return None


def no_failures(results) -> None:
    """Asserts that no rank recorded a failure (results: one list per rank)."""
    lines = [f"rank {r}: {msg}" for r, fails in enumerate(results) for msg in fails]
    assert not lines, f"{len(lines)} failures:\n" + "\n".join(lines[:40])
