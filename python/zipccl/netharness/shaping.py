"""Link rates and the tc commands that enforce them.

A host's link (its NIC; a host is one rank unless told otherwise) is shaped
on the egress side of both ends of its veth pair: the end inside the host's
namespace limits what it sends (its uplink) and the end on the bridge limits
what it receives (its downlink). That is a
full-duplex NIC of the given rate on a non-blocking switch, which is what a
rack of training hosts looks like to the collectives.

Each end gets a token bucket (tbf) as root qdisc; a one-way delay, when asked
for, is a netem child of the bucket, half on each end, so two hosts see
``delay`` one way and ``2 * delay`` round trip.

The ranks' traffic uses one TCP congestion control, set on each namespace's
route to the others (cubic unless told otherwise, see DEFAULT_TCP_CC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {
    "": 1,
    "bit": 1,
    "kbit": 10**3,
    "mbit": 10**6,
    "gbit": 10**9,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
}

_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_rate(text: str) -> int:
    """'1gbit', '10Gbit', '500mbit', '2.5g' -> bits per second."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"bad link rate {text!r}: use e.g. 1gbit, 10gbit, 500mbit")
    bits = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if bits < 1e6:
        raise ValueError(f"link rate {text!r} is below 1 mbit; too slow to be useful")
    return int(bits)


def parse_delay(text: str) -> float:
    """'0', '100us', '1ms', '0.5ms' -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*", text)
    if not m:
        raise ValueError(f"bad delay {text!r}: use e.g. 100us, 1ms")
    return float(m.group(1)) * _TIME_UNITS[m.group(2) or "ms"]


def format_rate(bits_per_s: float) -> str:
    """Bits per second as the shortest readable unit: 1 Gbit/s, 250 Mbit/s."""
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_s >= scale:
            value = bits_per_s / scale
            return f"{value:.3g} {unit}"
    return f"{bits_per_s:.0f} bit/s"


# The TCP congestion control the emulated hosts run unless told otherwise:
# Linux's default. The namespaces would otherwise inherit whatever the
# machine running the emulation uses (BBR on the one these benchmarks were
# tuned on), which says nothing about the hosts being emulated.
DEFAULT_TCP_CC = "cubic"

TCP_CC_HELP = ("TCP congestion control of the ranks' links in namespaces (default cubic, Linux's default; "
               "'system' keeps the one this machine's namespaces inherit)")


def parse_tcp_cc(text: str | None) -> str | None:
    """A congestion-control name for the ranks' routes, or None for "system"
    (keep the namespace default)."""
    name = (text or DEFAULT_TCP_CC).strip().lower()
    if name == "system":
        return None
    if not name.replace("_", "").isalnum():
        raise ValueError(f"bad TCP congestion control {text!r} (a name such as cubic, reno, bbr, or 'system')")
    return name


@dataclass(frozen=True)
class LinkSpec:
    """What every host's link looks like: rate in bit/s (None: unshaped),
    one-way host-to-host delay in seconds, and the TCP congestion control of
    the ranks' traffic (None: the namespace's default)."""

    rate_bps: int | None = None
    delay_s: float = 0.0
    tcp_cc: str | None = DEFAULT_TCP_CC

    @classmethod
    def parse(cls, rate: str | None, delay: str | None = None, tcp_cc: str | None = None) -> "LinkSpec":
        return cls(
            rate_bps=parse_rate(rate) if rate else None,
            delay_s=parse_delay(delay) if delay else 0.0,
            tcp_cc=parse_tcp_cc(tcp_cc),
        )

    @property
    def shaped(self) -> bool:
        return self.rate_bps is not None or self.delay_s > 0

    def describe(self) -> str:
        rate = format_rate(self.rate_bps) if self.rate_bps else "unshaped"
        if self.delay_s:
            rate += f", {self.delay_s * 1e3:g} ms one way"
        return rate

    def describe_tcp(self) -> str:
        return f"TCP {self.tcp_cc}" if self.tcp_cc else "TCP: the namespace default"


def tc_commands(dev: str, spec: LinkSpec) -> list[list[str]]:
    """The tc argument lists (after 'tc') that shape one end of a link.

    The bucket holds 2 ms of traffic (at least 256 KiB, so a 64 KiB GSO
    super-packet always fits and tbf never has to split it), and the queue
    behind it 20 ms, the usual size of a switch port buffer at these rates:
    deep enough that TCP keeps the link busy, shallow enough that a flow
    backs off rather than queueing for seconds.
    """
    cmds: list[list[str]] = []
    half_delay_us = int(round(spec.delay_s * 1e6 / 2))
    if spec.rate_bps:
        rate_bytes = spec.rate_bps / 8
        burst = max(256 * 1024, int(rate_bytes * 0.002))
        limit = max(4 * burst, int(rate_bytes * 0.020))
        cmds.append(
            ["qdisc", "replace", "dev", dev, "root", "handle", "1:", "tbf",
             "rate", f"{spec.rate_bps}bit", "burst", str(burst), "limit", str(limit)]
        )
        if half_delay_us:
            cmds.append(
                ["qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:",
                 "netem", "delay", f"{half_delay_us}us", "limit", "100000"]
            )
    elif half_delay_us:
        cmds.append(
            ["qdisc", "replace", "dev", dev, "root", "handle", "1:",
             "netem", "delay", f"{half_delay_us}us", "limit", "100000"]
        )
    return cmds
