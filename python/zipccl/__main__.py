"""Command line: ``python -m zipccl info``, ``python -m zipccl demo``,
``python -m zipccl bench ...`` and ``python -m zipccl codec compress|decompress
IN OUT`` (checkpoint files, zipccl.checkpoint)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, NamedTuple


class BenchCommand(NamedTuple):
    """One ``python -m zipccl bench <name>`` subcommand."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]  # adds its arguments
    run: Callable[[argparse.Namespace], int]  # returns the exit status


# Benchmarks register here (name -> BenchCommand); each becomes a
# sub-subcommand of `bench`.
BENCH_COMMANDS: dict[str, BenchCommand] = {}


def _configure_codec_bench(p: argparse.ArgumentParser) -> None:
    from .bench.codec import configure

    configure(p)


def _run_codec_bench(args: argparse.Namespace) -> int:
    from .bench.codec import run

    return run(args)


BENCH_COMMANDS["codec"] = BenchCommand(
    "codec ratio and GB/s per codec and dtype, with memcpy, huff0 and zstd in the same run",
    _configure_codec_bench,
    _run_codec_bench,
)


def _configure_kernels_bench(p: argparse.ArgumentParser) -> None:
    from .bench.kernels import configure

    configure(p)


def _run_kernels_bench(args: argparse.Namespace) -> int:
    from .bench.kernels import run

    return run(args)


BENCH_COMMANDS["kernels"] = BenchCommand(
    "GB/s of the CUDA codec kernels (encode, decode, decode+reduce) against a device copy",
    _configure_kernels_bench,
    _run_kernels_bench,
)


def _format_gpu(gpu: Any) -> str:
    if not isinstance(gpu, dict):
        return str(gpu)
    text = f"[{gpu.get('index', '?')}] {gpu.get('name', 'unknown')}"
    if gpu.get("memory_mb"):
        text += f", {gpu['memory_mb'] / 1024:.1f} GiB"
    return text


def format_info(data: dict[str, Any], package_version: str, torch_version: str) -> str:
    """The engine's zc_info JSON as readable lines."""
    lines = []
    engine_version = data.get("zipccl_version", "unknown")
    version = package_version
    if engine_version not in (package_version, "", "unknown"):
        version += f" (engine {engine_version})"
    lines.append(f"zipccl   {version}")
    lines.append(f"Go       {data.get('go_version', 'unknown')}")
    lines.append(f"torch    {torch_version}")

    cpu = data.get("cpu") or {}
    cores = cpu.get("logical_cores")
    lines.append(
        f"CPU      {cpu.get('brand') or 'unknown'}"
        + (f" ({cores} logical cores)" if cores else "")
    )
    features = cpu.get("features") or []
    lines.append(f"SIMD     {' '.join(features) if features else 'none'}")

    gpus = data.get("gpus") or []
    if gpus:
        lines.append(f"GPUs     {_format_gpu(gpus[0])}")
        lines.extend(f"         {_format_gpu(g)}" for g in gpus[1:])
    else:
        why = data.get("gpu_error")
        lines.append("GPUs     none" + (f" ({why})" if why else ""))
    if data.get("driver_version"):
        lines.append(f"Driver   {data['driver_version']}")

    nccl = data.get("nccl") or {}
    if nccl.get("found"):
        text = "found"
        if nccl.get("version"):
            text += f", version {nccl['version']}"
        if nccl.get("path"):
            text += f" ({nccl['path']})"
    else:
        text = "not found" + (f" ({nccl['error']})" if nccl.get("error") else "")
    lines.append(f"NCCL     {text}")
    if data.get("host_id"):
        # what zipccl.topology() groups ranks by
        lines.append(f"Host     {data['host_id']} (machine and network namespace)")
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    import torch

    import zipccl

    try:
        data = zipccl.info()
    except (RuntimeError, OSError) as exc:
        print(f"zipccl {zipccl.__version__}, torch {torch.__version__}", file=sys.stderr)
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(format_info(data, zipccl.__version__, torch.__version__))
    return 0


def _build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog="python -m zipccl", description="zipccl command line"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = commands.add_parser(
        "info", help="versions, CPU SIMD features, GPUs and NCCL as the engine sees them"
    )
    info.add_argument("--json", action="store_true", help="print the raw JSON")
    info.set_defaults(func=_cmd_info)

    from .demo.cli import configure as _configure_demo, run as _run_demo

    demo = commands.add_parser(
        "demo", help="GPT training with gloo and zipccl, DDP then FSDP2, over shaped links"
    )
    _configure_demo(demo)
    demo.set_defaults(func=_run_demo)

    codec = commands.add_parser(
        "codec", help="compress or decompress a safetensors / torch.save checkpoint file"
    )
    from .checkpoint import configure as _configure_codec, run as _run_codec

    _configure_codec(codec)
    codec.set_defaults(func=_run_codec)

    from .bench import register as _register_benches

    _register_benches(BENCH_COMMANDS, BenchCommand)
    bench = commands.add_parser("bench", help="benchmarks")
    benches = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    for name, command in BENCH_COMMANDS.items():
        sub = benches.add_parser(name, help=command.help)
        command.configure(sub)
        sub.set_defaults(func=command.run)
    bench.set_defaults(func=None)
    return parser, bench


def main(argv: list[str] | None = None) -> int:
    parser, bench = _build_parser()
    args = parser.parse_args(argv)
    if args.func is None:  # `bench` without a benchmark: list them
        bench.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
