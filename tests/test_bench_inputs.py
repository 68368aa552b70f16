"""The collective benchmark's inputs and options (no ranks launched): the
random-bit data really is incompressible and finite, and the zipccl:MODE
backends parse as documented."""

from __future__ import annotations

import argparse

import pytest
import torch

import zipccl.codec
from zipccl.bench import collectives
from zipccl.bench.data import make_input


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_random_bits_are_finite_incompressible_and_reproducible(dtype):
    x = make_input("random", 1 << 18, dtype, rank=1, world_size=4, seed=7)
    assert x.dtype == dtype and x.numel() == 1 << 18
    assert bool(torch.isfinite(x).all())
    # Four ranks' values summed in any order stay finite.
    assert bool(torch.isfinite(x.float() * 4).all())
    assert torch.equal(x.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       make_input("random", 1 << 18, dtype, rank=1, world_size=4, seed=7)
                       .view(torch.int16 if dtype != torch.float32 else torch.int32))
    assert not torch.equal(x, make_input("random", 1 << 18, dtype, rank=2, world_size=4, seed=7))
    for kind in ("zip3", "huff"):
        coded = zipccl.codec.compress(x, codec=kind)
        assert len(coded) >= x.numel() * x.element_size() * 0.97, (kind, len(coded))


def config(backends: str) -> dict:
    return config_args(["--backends", backends])


def test_zipccl_mode_backends():
    assert config("gloo,zipccl,zipccl:never")["backends"] == ["gloo", "zipccl", "zipccl:never"]
    for bad in ("gloo:never", "zipccl:sometimes", "zipccl,zipccl"):
        with pytest.raises(ValueError):
            config(bad)


def test_a2a_splits():
    from zipccl.bench.ops import a2a_splits
    n, count = 4, 1000
    assert a2a_splits(count, n, 0.0) == [[250] * 4] * 4  # even
    s = a2a_splits(count, n, 1.0)
    assert sum(map(sum, s)) == n * count  # the same traffic in all
    sends = [sum(row) for row in s]
    assert sends == sorted(sends, reverse=True) and sends[0] > sends[-1]  # ranks send different amounts
    for r, row in enumerate(s):
        assert min(row) > 0 and row[(r + 1) % n] == max(row)  # most goes to the next rank; none is empty
    with pytest.raises(ValueError):
        config_args(["--a2a-skew", "-1"])


def config_args(extra: list[str]) -> dict:
    p = argparse.ArgumentParser()
    collectives.configure(p)
    return collectives._config(p.parse_args(extra))


def test_summarize_keeps_host_layouts_apart():
    from zipccl.bench.summarize import layout

    assert layout({"world_size": 4, "hosts": 4, "ranks_per_host": 1}) == "4"
    assert layout({"world_size": 4, "hosts": 2, "ranks_per_host": 2}) == "2x2"
    assert layout({"world_size": 4, "hosts": 4}) == "4"  # a CSV from before hosts


def test_backend_entries():
    from zipccl.bench.specs import BackendSpec, parse_backend

    assert parse_backend("gloo") == BackendSpec("gloo")
    assert parse_backend("zipccl:never@staged") == BackendSpec("zipccl", "never", "staged")
    assert parse_backend("zipccl+flat+enc") == BackendSpec("zipccl", encrypt=True, flat=True)
    assert parse_backend("zipccl+int8").lossy_policy() == {"all_gather": "int8", "reduce_scatter": "int8",
                                                          "all_reduce": "int8"}
    assert parse_backend("zipccl+int4").lossy_policy() == {"all_gather": "int8", "reduce_scatter": "int4",
                                                          "all_reduce": "int4"}
    assert parse_backend("zipccl+fp8").lossy_policy() == {"all_gather": "fp8", "reduce_scatter": "fp8",
                                                         "all_reduce": "fp8"}
    for bad in ("gloo:never", "gloo+enc", "gloo+int8", "zipccl+zip", "zipccl+enc+enc", "zipccl:sometimes",
                "zipccl@gpu", "zipccl+int8+int4", "zipccl+fp8+int8", "gloo+fp8"):
        with pytest.raises(ValueError, match="--backends"):
            parse_backend(bad)


def test_lossy_check_bounds_the_fp8_error():
    # the benchmark's fp8 bound holds for the format's real coding (the
    # NumPy reference, with outliers that the transform spreads), and a
    # wrong value fails it
    import numpy as np
    import torch
    from fp8_reference import decode, encode, to_bits
    from zipccl.bench.ops import compare, lossy_tolerance
    from zipccl.bench.specs import OPS

    x = torch.randn(2 * 5000) * 0.02
    x[::997] *= 50
    ref = x.to(torch.bfloat16)
    halves = [to_bits(h.float().numpy(), "bfloat16") for h in ref.reshape(2, -1)]
    got = torch.cat([torch.from_numpy(decode(*encode(b, "bfloat16", 256), "bfloat16").view(np.int16)).view(torch.bfloat16)
                     for b in halves])
    tol = lossy_tolerance(OPS["all_gather"], ref, 2, {"all_gather": "fp8"}, None)
    assert not torch.equal(got, ref)
    assert compare(OPS["all_gather"], got, ref, tol)[0] == "ok"
    wrong = got.clone()
    wrong[7] = wrong[7] + 0.5
    assert compare(OPS["all_gather"], wrong, ref, tol)[0] == "FAIL"


def test_lossy_check_bounds_the_int8_error():
    import torch
    from zipccl.bench.ops import compare, lossy_tolerance
    from zipccl.bench.specs import OPS

    modes = {"all_gather": "int8"}
    ref = (torch.randn(2 * 5000) * 0.02).to(torch.bfloat16)
    tol = lossy_tolerance(OPS["all_gather"], ref, 2, modes, None)
    assert tol is not None and tol.shape == ref.shape
    step = ref.double().reshape(2, -1)[:, :2048].abs().max(dim=1).values / 127
    assert torch.all(tol.reshape(2, -1)[:, 0] >= step / 2)
    near = ref.double() + tol * 0.9  # within the bound
    assert compare(OPS["all_gather"], near, ref, tol)[0] in ("ok", "exact")
    far = ref.double() + tol * 1.5
    assert compare(OPS["all_gather"], far, ref, tol)[0] == "FAIL"
    assert lossy_tolerance(OPS["all_reduce"], ref, 2, modes, None) is None


def test_lossy_check_bounds_the_reductions():
    # a 4-rank int4 reduce_scatter: n-1 = 3 half steps of sum(|x_i|)'s
    # block absmax; all_reduce adds one of the result's block
    import torch
    from zipccl.bench.ops import compare, lossy_tolerance
    from zipccl.bench.specs import OPS

    modes = {"reduce_scatter": "int4", "all_reduce": "int4"}
    xs = torch.randn(4, 5000, dtype=torch.float64)
    ref, total = xs.sum(0).float(), xs.abs().sum(0).float()
    tol = lossy_tolerance(OPS["reduce_scatter"], ref, 4, modes, total)
    assert float(tol[0]) >= 3 * float(total[:256].max()) / 7 / 2  # int4: blocks of 256
    assert compare(OPS["reduce_scatter"], ref.double() + tol * 0.9, ref, tol)[0] == "ok"
    assert compare(OPS["reduce_scatter"], ref.double() + tol * 1.5, ref, tol)[0] == "FAIL"
    tar = lossy_tolerance(OPS["all_reduce"], ref, 4, modes, total)
    assert torch.all(tar > tol)
