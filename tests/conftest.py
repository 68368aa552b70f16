"""Session fixtures: one cached harness.Pool per world size.

Starting a rank costs torch's import (~4 s of CPU), so the matrix tests share
long-lived pools. A pool whose task hung is killed by the harness and
replaced here on its next use, so one hang fails one test, not the session.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402


class Pools:
    def __init__(self) -> None:
        self._pools: dict[int, harness.Pool] = {}

    def get(self, world_size: int) -> harness.Pool:
        pool = self._pools.get(world_size)
        if pool is not None and not pool.healthy():
            pool.close(force=True)
            pool = None
        if pool is None:
            pool = harness.Pool(world_size)
            self._pools[world_size] = pool
        return pool

    def close(self) -> None:
        for pool in self._pools.values():
            pool.begin_close(force=pool.broken)
        for pool in self._pools.values():
            pool.finish_close()
        self._pools.clear()


@pytest.fixture(scope="session")
def pools():
    p = Pools()
    yield p
    p.close()


WORLD_SIZES = [1, 2, 3, 4]


def pytest_configure(config):
    # tests/test_gpu.py: the CUDA kernels through libzipccl_cuda.so and the
    # backend on CUDA tensors; they skip without a GPU (run them with
    # `make test-gpu`)
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (make test-gpu)")
