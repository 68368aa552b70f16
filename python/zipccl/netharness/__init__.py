"""A multi-host network on one machine, for benchmarks and the demo.

    from zipccl.netharness import LinkSpec, Network, launch_ranks

    with Network(4, LinkSpec.parse("1gbit", "0.1ms")) as net:
        print(net.describe())          # netns + tc when root, else loopback
        launch_ranks(net, ["-m", "zipccl.bench.worker", ...])

    Network(4, link, ranks_per_host=2)  # 2 hosts of 2 ranks sharing a NIC

Nothing in this subpackage uses torch; the rate check's socket script runs
by path, so it starts in milliseconds inside a namespace.
"""

from .launch import RankResult, RanksFailed, cpu_plan, launch_ranks
from .layout import HostLayout, add_layout_arguments
from .ratecheck import RateCheck, check_links, round_trip
from .shaping import (DEFAULT_TCP_CC, TCP_CC_HELP, LinkSpec, format_rate, parse_delay, parse_rate, parse_tcp_cc,
                      tc_commands)
from .topology import IFNAME, Network, NetworkError, cleanup_stale, netns_unavailable_reason, nic_bytes

__all__ = [
    "DEFAULT_TCP_CC",
    "HostLayout",
    "IFNAME",
    "LinkSpec",
    "Network",
    "NetworkError",
    "RankResult",
    "RanksFailed",
    "RateCheck",
    "TCP_CC_HELP",
    "add_layout_arguments",
    "check_links",
    "cleanup_stale",
    "cpu_plan",
    "format_rate",
    "launch_ranks",
    "netns_unavailable_reason",
    "nic_bytes",
    "parse_delay",
    "parse_rate",
    "parse_tcp_cc",
    "round_trip",
    "tc_commands",
]
