"""The Python package and the C++ shim in one process (world size 1): lazy
loading, registration, options, futures, non-contiguous tensors, coalescing,
profiler names, error surfacing and the fork guard. Multi-rank behaviour is
covered with tests/harness.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import zipccl
from zipccl.__main__ import format_info, main


def run_python(code: str, prelude: str = "", timeout: float = 240) -> str:
    """Runs code in a fresh interpreter (zipccl loads Go once per process)."""
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


PRELUDE = """
import os, sys, tempfile
import torch, torch.distributed as dist

def init(**kw):
    store = dist.FileStore(tempfile.mktemp(), 1)
    dist.init_process_group("zipccl", rank=0, world_size=1, store=store, **kw)
"""


def test_import_is_lazy_and_registers():
    out = run_python(
        """
        import sys
        import torch.distributed as dist
        import zipccl
        assert "zipccl" in dist.Backend.backend_list
        assert dist.Backend.backend_capability["zipccl"] == ["cpu", "cuda"]
        assert dist.Backend.default_device_backend_map["cuda"] != "zipccl"
        zipccl._register()  # idempotent
        print("loaded:", "zipccl._C" in sys.modules)
        """
    )
    assert "loaded: False" in out


def test_options_encoding():
    opts = zipccl.Options(compression="auto", extra={"chunk": 4096, "check": True, "skip": None})
    assert opts.to_string() == "compression=auto;chunk=4096;check=true"
    assert zipccl._options_string(None) == ""
    assert zipccl._options_string({"a": "b", "c": False}) == "a=b;c=false"
    with pytest.raises(ValueError):
        zipccl._options_string({"a;b": 1})
    with pytest.raises(ValueError):
        zipccl._options_string({"a": "x;y"})
    with pytest.raises(TypeError):
        zipccl._options_string(42)


def test_cli_formats_info_and_bench_dispatches(capsys):
    text = format_info(
        {
            "zipccl_version": "0.1.0",
            "go_version": "go1.26",
            "cpu": {"brand": "Test CPU", "logical_cores": 2, "features": ["AVX2", "F16C"]},
            "gpus": [],
            "nccl": {"found": True, "path": "/x/libnccl.so.2", "version": "2.30.7"},
        },
        "0.1.0",
        "2.15.0",
    )
    assert "Go       go1.26" in text
    assert "SIMD     AVX2 F16C" in text
    assert "GPUs     none" in text
    assert "NCCL     found, version 2.30.7 (/x/libnccl.so.2)" in text
    assert main(["bench"]) == 0
    assert "BENCHMARK" in capsys.readouterr().out


def test_info_reports_the_engine():
    out = run_python("import zipccl, json; print(json.dumps(zipccl.info()))")
    for key in ("zipccl_version", "go_version", "cpu", "gpus", "nccl"):
        assert key in out


def test_environment_set_in_python_reaches_the_engine():
    # The Go runtime of a c-shared library copies the environment it was
    # loaded with; variables a script sets through os.environ (before
    # loading zipccl, and after) must still reach the engine.
    out = run_python(
        """
        import json, os
        os.environ["ZIPCCL_CUDA_LIB"] = "/nonexistent/zipccl-env-first.so"
        import zipccl
        print(json.dumps(zipccl.info()["cuda_kernels"]["path"]))
        os.environ["ZIPCCL_CUDA_LIB"] = "/nonexistent/zipccl-env-later.so"
        print(json.dumps(zipccl.info()["cuda_kernels"]["path"]))
        """
    )
    assert out.split() == ['"/nonexistent/zipccl-env-first.so"', '"/nonexistent/zipccl-env-later.so"'], out


def test_collectives_futures_and_errors():
    run_python(
        """
        # No `import zipccl` where torch finds backends through the
        # torch.distributed.backends entry point (2.15; 2.11 does not).
        import inspect
        import torch.distributed.distributed_c10d as c10d
        if "torch.distributed.backends" not in inspect.getsource(c10d):
            import zipccl
        init(pg_options={"x": 1})
        assert "zipccl._C" in sys.modules
        import zipccl
        t = torch.arange(6, dtype=torch.float32)
        dist.all_reduce(t)
        assert torch.equal(t, torch.arange(6.0))
        work = dist.all_reduce(t, async_op=True)
        value = work.get_future().wait()
        assert work.is_completed() and torch.equal(value[0], t)

        # Non-contiguous tensors go through a contiguous temporary.
        y = torch.arange(12.0).reshape(3, 4).t()
        dist.broadcast(y, src=0)
        assert torch.equal(y, torch.arange(12.0).reshape(3, 4).t())
        nc = torch.zeros(4, 2)[:, 0]
        dist.all_gather([nc], torch.arange(4.0))
        assert torch.equal(nc, torch.arange(4.0))

        # AVG and PREMUL_SUM are passed on.
        for op in (dist.ReduceOp.AVG, dist._make_nccl_premul_sum(2.0)):
            dist.all_reduce(torch.ones(3), op=op)

        # The C++ side validates before anything is sent.
        for bad, text in [
            (lambda: dist.all_reduce(torch.zeros(2, dtype=torch.uint16)),
             "all_reduce does not support dtype UInt16"),
            (lambda: dist.all_gather_into_tensor(torch.zeros(5), torch.zeros(4)),
             "must have group size (1) x input elements (4) = 4"),
            (lambda: dist.all_to_all_single(torch.zeros(3, 2), torch.zeros(3, 2), [2], [3]),
             "output split sizes sum to 2 but dim 0 has 3 rows"),
        ]:
            try:
                bad()
            except RuntimeError as e:
                assert text in str(e), str(e)
            else:
                raise AssertionError("accepted: " + text)

        for fn in (
            lambda: dist.reduce_scatter_tensor(torch.zeros(4), torch.ones(4)),
            lambda: dist.all_to_all_single(torch.zeros(4), torch.ones(4)),
            lambda: dist.reduce(torch.ones(4), dst=0),
            lambda: dist.gather(torch.ones(2), [torch.zeros(2)], dst=0),
            lambda: dist.scatter(torch.zeros(2), [torch.ones(2)], src=0),
            lambda: dist.barrier(),
        ):
            fn()
        stats = zipccl.stats()
        assert isinstance(stats, dict), stats
        dist.destroy_process_group()
        print("ok")
        """,
        prelude=PRELUDE,
    )


def test_coalescing_and_profiler_names():
    run_python(
        """
        import zipccl
        init()
        pg = dist.distributed_c10d._get_default_group()
        backend = pg._get_backend(torch.device("cpu"))
        assert backend.supports_coalescing and backend.supports_splitting

        a, b = torch.ones(3), torch.ones(2, 2)
        with dist._coalescing_manager(async_ops=True) as cm:   # allreduce_coalesced
            dist.all_reduce(a)
            dist.all_reduce(b)
        cm.wait()
        g1, g2 = torch.zeros(2), torch.zeros(3)
        with dist._coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
            dist.all_gather_into_tensor(g1, torch.ones(2))      # start/endCoalescing
            dist.all_gather_into_tensor(g2, torch.full((3,), 2.0))
        cm.wait()
        assert torch.equal(g1, torch.ones(2)) and torch.equal(g2, torch.full((3,), 2.0))

        pg._start_coalescing(torch.device("cpu"))                 # nothing inside
        empty = pg._end_coalescing(torch.device("cpu"))
        assert empty.is_completed() and empty.get_future().wait() == []

        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            dist.all_reduce(torch.ones(8))
            dist.broadcast(torch.ones(8), 0)
            dist.all_gather_into_tensor(torch.zeros(8), torch.ones(8))
            dist.reduce_scatter_tensor(torch.zeros(8), torch.ones(8))
            dist.all_to_all_single(torch.zeros(8), torch.ones(8))
            dist.barrier()
        names = {e.key for e in prof.key_averages()}
        for name in ("zipccl:all_reduce", "zipccl:broadcast", "zipccl:all_gather_into_tensor",
                     "zipccl:reduce_scatter_tensor", "zipccl:all_to_all_single", "zipccl:barrier"):
            assert name in names, (name, sorted(n for n in names if "zipccl" in n))

        sub = dist.new_group([0])
        dist.all_reduce(torch.ones(2), group=sub)
        try:
            split = dist.split_group(split_ranks=[[0]])
        except RuntimeError as e:
            # torch 2.11 splits only a default group bound to a device.
            assert "No device associated with the default pg" in str(e), e
        else:
            dist.all_reduce(torch.ones(2), group=split)
        dist.destroy_process_group()
        print("ok")
        """,
        prelude=PRELUDE,
    )


def test_fork_guard():
    out = run_python(
        """
        import zipccl
        init()
        dist.all_reduce(torch.ones(2))
        pid = os.fork()
        if pid == 0:
            code = 0
            for call in (lambda: dist.all_reduce(torch.ones(2)), zipccl.info):
                try:
                    call()
                    code = 3
                except RuntimeError as e:
                    if "forked" not in str(e) or "'spawn'" not in str(e):
                        code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        dist.all_reduce(torch.ones(2))   # the parent is unaffected
        dist.destroy_process_group()
        print("ok")
        """,
        prelude=PRELUDE,
    )
    assert "ok" in out
