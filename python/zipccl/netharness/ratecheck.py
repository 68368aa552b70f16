"""Checks that the shaped links deliver the rate they were given.

A link is a host's NIC (one per rank unless the network has several ranks
per host), so flows go between hosts. Three measurements, each a few
seconds of TCP through the bridge:

* one flow, host 0 -> host 1: the uplink/downlink rate;
* host 0 -> 1 and 1 -> 0 at once: the link is full duplex (each direction
  gets the full rate, as on a real NIC);
* host 0 -> 1 and host 2 -> 1 at once (3+ hosts): host 1's downlink is
  shaped too, so the two flows share one rate instead of getting two;

and ``round_trip``, a 1-byte TCP ping-pong that shows the configured delay.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from .shaping import format_rate
from .topology import Network

_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sockperf.py")


@dataclass
class RateCheck:
    name: str
    flows: list[tuple[int, int]]  # (src host, dst host)
    measured_bps: list[float]
    expected_bps: float | None  # what the shaping should allow in total

    @property
    def total_bps(self) -> float:
        return sum(self.measured_bps)

    def ok(self, tolerance: float = 0.15) -> bool | None:
        """Within tolerance of the shaped rate (None when unshaped)."""
        if self.expected_bps is None:
            return None
        return abs(self.total_bps - self.expected_bps) <= tolerance * self.expected_bps

    def describe(self) -> str:
        parts = ", ".join(f"{s}->{d} {format_rate(b)}" for (s, d), b in zip(self.flows, self.measured_bps))
        text = f"{self.name:<28} {parts}"
        if len(self.flows) > 1:
            text += f" (sum {format_rate(self.total_bps)})"
        verdict = self.ok()
        if verdict is not None:
            text += f"  expected {format_rate(self.expected_bps)}: {'OK' if verdict else 'OFF'}"
        return text


def _measure(net: Network, flows: list[tuple[int, int]], seconds: float) -> list[float]:
    """Runs the flows at once; returns each flow's received bits per second."""
    receivers: dict[int, subprocess.Popen[str]] = {}
    ports: dict[int, int] = {}
    by_dst: dict[int, list[int]] = {}
    for i, (_, dst) in enumerate(flows):
        by_dst.setdefault(dst, []).append(i)
    for dst, idxs in by_dst.items():
        proc = subprocess.Popen(
            [*net.host_command_prefix(dst), sys.executable, _SCRIPT, "recv", "0", str(len(idxs))],
            stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        ports[dst] = int(proc.stdout.readline().split()[1])  # "ready PORT"
        receivers[dst] = proc
    senders = [
        subprocess.Popen([*net.host_command_prefix(src), sys.executable, _SCRIPT, "send",
                          net.host_address(dst), str(ports[dst]), str(seconds)])
        for src, dst in flows
    ]
    for s in senders:
        s.wait(timeout=seconds + 30)
    rates = [0.0] * len(flows)
    for dst, proc in receivers.items():
        out, _ = proc.communicate(timeout=30)
        per_flow = [line.split() for line in out.strip().splitlines()]
        # Flows to one receiver arrive in any order; they are symmetric, so
        # assign them in order.
        for i, (nbytes, secs) in zip(by_dst[dst], per_flow):
            rates[i] = int(nbytes) * 8 / float(secs) if float(secs) > 0 else 0.0
    return rates


def check_links(net: Network, seconds: float = 3.0, quick: bool = False) -> list[RateCheck]:
    """Measures the links of a network with at least two hosts (``quick``:
    the single flow only)."""
    if net.hosts < 2:
        raise ValueError("a rate check needs at least 2 hosts")
    rate = float(net.link.rate_bps) if net.mode == "netns" and net.link.rate_bps else None
    plans = [("one flow", [(0, 1)], rate)]
    if not quick:
        plans.append(("full duplex", [(0, 1), (1, 0)], rate and 2 * rate))
        if net.hosts >= 3:
            plans.append(("two senders, one receiver", [(0, 1), (2, 1)], rate))
    return [RateCheck(name, flows, _measure(net, flows, seconds), expected) for name, flows, expected in plans]


def round_trip(net: Network, count: int = 200) -> float:
    """Median TCP round trip between hosts 0 and 1, in seconds: with a
    one-way delay d it should be about 2 * d."""
    server = subprocess.Popen([*net.host_command_prefix(1), sys.executable, _SCRIPT, "echo", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        out = subprocess.run([*net.host_command_prefix(0), sys.executable, _SCRIPT, "ping", net.host_address(1),
                              str(port), str(count)], capture_output=True, text=True, timeout=60, check=True).stdout
        return float(out.strip())
    finally:
        server.wait(timeout=10)
