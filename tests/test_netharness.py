"""The benchmark harness's emulated hosts: the TCP congestion control of the
ranks' traffic is the one asked for (cubic by default), on both ends of a
connection, whatever this machine's namespaces would inherit.

The namespace test needs root and `ip netns`; it is skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from zipccl.netharness import DEFAULT_TCP_CC, LinkSpec, Network, NetworkError, parse_tcp_cc


def test_parse_tcp_cc() -> None:
    assert DEFAULT_TCP_CC == "cubic"
    assert LinkSpec.parse("1gbit").tcp_cc == "cubic"
    assert LinkSpec().tcp_cc == "cubic"
    assert parse_tcp_cc("Reno") == "reno"
    assert parse_tcp_cc("system") is None
    assert "namespace default" in LinkSpec.parse("1gbit", None, "system").describe_tcp()
    with pytest.raises(ValueError, match="congestion control"):
        parse_tcp_cc("cubic; reboot")


# Rank 1 listens, rank 0 connects; each side prints its socket's
# congestion control.
PEER = r"""
import socket, sys
role, addr = sys.argv[1], sys.argv[2]
if role == "listen":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 29517))
    s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
else:
    c = socket.create_connection((addr, 29517), timeout=10)
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode(), flush=True)
c.recv(1) if role == "listen" else c.close()
"""


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    return None


def _available() -> list[str]:
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        return f.read().split()


def _both_ends(net: Network) -> tuple[str, str]:
    listener = subprocess.Popen([*net.command_prefix(1), sys.executable, "-c", PEER, "listen", net.address(1)],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "ready"
        client = subprocess.run([*net.command_prefix(0), sys.executable, "-c", PEER, "connect", net.address(1)],
                                capture_output=True, text=True, timeout=30, check=True)
        server = listener.stdout.readline().strip()
        listener.wait(timeout=30)
        return client.stdout.strip(), server
    finally:
        listener.kill()


@pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))
@pytest.mark.timeout(120)
def test_ranks_use_the_congestion_control_asked_for() -> None:
    # reno is built into every kernel and is neither the default asked for
    # nor what this machine's namespaces inherit (cubic or bbr usually).
    wanted = ["reno", DEFAULT_TCP_CC] if DEFAULT_TCP_CC in _available() else ["reno"]
    for cc in wanted:
        with Network(2, LinkSpec.parse("1gbit", None, cc)) as net:
            assert net.mode == "netns", net.reason
            assert f"TCP {cc}" in net.describe()
            assert _both_ends(net) == (cc, cc)


@pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))
@pytest.mark.timeout(60)
def test_unknown_congestion_control_is_a_clear_error() -> None:
    with pytest.raises(NetworkError, match="not available here"):
        with Network(2, LinkSpec.parse("1gbit", None, "nosuchcc")):
            pass
