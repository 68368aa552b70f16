"""torch's own backend test suite (DistributedTest._DistTestBase, run as
torch runs it for gloo in test/distributed/test_distributed_spawn.py, but
with each test's ranks forked: see TestDistBackendWithFork), with every
process group that would be gloo made a zipccl one.

The suite gates most of its tests on BACKEND == "gloo", so BACKEND stays
gloo and the substitution happens below dist.init_process_group and
dist.new_group, patched at import. Run by tests/test_torch_suite.py; by
hand:

    BACKEND=gloo WORLD_SIZE=3 TEMP_DIR=$(mktemp -d) \\
        python -m pytest tests/torch_suite/suite_zipccl.py -k all_gather
"""

from __future__ import annotations

import functools
import os

import torch
import torch.distributed as dist

if os.environ.get("BACKEND") != "gloo":
    raise RuntimeError("run with BACKEND=gloo (the suite's gloo tests run on zipccl groups)")


def _as_zipccl(backend):
    """gloo (the default, or named) becomes zipccl; other backends stay."""
    if backend is None or (isinstance(backend, str) and backend.lower() == "gloo"):
        return "zipccl"
    return backend


def _patch():
    import zipccl  # noqa: F401  (registers the backend)

    init, new_group = dist.init_process_group, dist.new_group

    @functools.wraps(init)
    def init_process_group(*args, **kwargs):
        if args:
            args = (_as_zipccl(args[0]), *args[1:])
        else:
            kwargs["backend"] = _as_zipccl(kwargs.get("backend"))
        return init(*args, **kwargs)

    @functools.wraps(new_group)
    def new_group_(*args, **kwargs):
        if len(args) > 2:
            args = (*args[:2], _as_zipccl(args[2]), *args[3:])
        elif kwargs.get("backend") is not None:
            kwargs["backend"] = _as_zipccl(kwargs["backend"])
        return new_group(*args, **kwargs)

    # torch.distributed's names and the module defining them (its own
    # helpers, such as new_subgroups, call the module's)
    from torch.distributed import distributed_c10d

    for mod in (dist, distributed_c10d):
        mod.init_process_group = init_process_group
        mod.new_group = new_group_


_patch()

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    """Each test's ranks are forked from this process rather than spawned,
    as torch's spawn runner does: a spawned rank imports torch again, which
    on two cores made the 195 tests that only skip here cost 14 minutes.
    This process never loads zipccl's engine (import zipccl only registers
    the backend), so each rank loads its own."""

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
