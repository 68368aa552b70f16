"""Benchmarks behind ``python -m zipccl bench <name>``.

* ``collectives``: nccl-tests style, zipccl against gloo in the same run on
  shaped links (collectives.py, worker.py on the ranks).
* ``link``: measures what the harness's shaped links really deliver.
* ``groups``: what creating Megatron's process groups costs, zipccl
  against gloo (groups.py).

``register`` adds them to the CLI's registry; the modules that need torch on
the ranks are imported only when a benchmark runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, MutableMapping
from typing import Any

from ..netharness.shaping import TCP_CC_HELP


def _configure_collectives(p: argparse.ArgumentParser) -> None:
    from .collectives import configure

    configure(p)


def _run_collectives(args: argparse.Namespace) -> int:
    from .collectives import run

    return run(args)


def _configure_link(p: argparse.ArgumentParser) -> None:
    from ..netharness import add_layout_arguments

    # 3 hosts by default: enough for the shared-downlink check
    add_layout_arguments(p, 3)
    p.add_argument("--link-rate", default="1gbit", help="per-host link rate (default 1gbit)")
    p.add_argument("--delay", default=None, help="one-way delay, e.g. 1ms")
    p.add_argument("--tcp-cc", default=None, help=TCP_CC_HELP)
    p.add_argument("--seconds", type=float, default=3.0, help="length of each measurement (default 3)")


def _run_link(args: argparse.Namespace) -> int:
    import sys

    from ..netharness import HostLayout, LinkSpec, Network, NetworkError, check_links, round_trip

    try:
        link = LinkSpec.parse(args.link_rate, args.delay, args.tcp_cc)
        layout = HostLayout.from_args(args.world_size, args.hosts, args.ranks_per_host, 3, args.host_sizes)
        if layout.hosts < 2:
            raise ValueError("a link check needs at least 2 hosts")
    except ValueError as exc:
        print(f"zipccl bench link: {exc}", file=sys.stderr)
        return 2
    try:
        with Network(layout.world_size, link, layout=layout) as net:
            print(f"network: {net.describe()}")
            checks = check_links(net, seconds=args.seconds)
            rtt = round_trip(net)
    except NetworkError as exc:
        print(f"zipccl bench link: {exc}", file=sys.stderr)
        return 2
    for c in checks:
        print(c.describe())
    print("(TCP goodput; with 1500-byte frames it tops out near 95% of the link rate)")
    expected = f" (2 x delay = {2 * link.delay_s * 1e3:g} ms)" if link.delay_s else ""
    print(f"{'round trip 0->1->0':<28} {rtt * 1e3:.3f} ms median of 200 1-byte ping-pongs{expected}")
    return 0 if all(c.ok() in (True, None) for c in checks) else 1


def _configure_groups(p: argparse.ArgumentParser) -> None:
    from .groups import configure

    configure(p)


def _run_groups(args: argparse.Namespace) -> int:
    from .groups import run

    return run(args)


def register(commands: MutableMapping[str, Any], command_type: Callable[..., Any]) -> None:
    """Adds this package's benchmarks to the CLI's BENCH_COMMANDS;
    command_type is its BenchCommand (passed in: under ``python -m zipccl``
    the CLI module is ``__main__``, not ``zipccl.__main__``)."""
    commands.setdefault("collectives", command_type(
        "zipccl vs gloo collectives (nccl-tests style) over shaped links",
        _configure_collectives, _run_collectives))
    commands.setdefault("link", command_type(
        "measure the shaped links of the multi-host harness (TCP, like iperf)",
        _configure_link, _run_link))
    commands.setdefault("groups", command_type(
        "time to create Megatron's process groups and plain subgroups, zipccl vs gloo",
        _configure_groups, _run_groups))
