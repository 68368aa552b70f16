"""The benchmark harness's emulated hosts: the TCP congestion control of the
ranks' traffic is the one asked for (cubic by default), on both ends of a
connection, whatever this machine's namespaces would inherit; and the link
trace counts what crosses each link.

The namespace tests need root and `ip netns`; they are skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from zipccl.netharness import DEFAULT_TCP_CC, LinkSpec, Network, NetworkError, parse_tcp_cc
from zipccl.netharness.linktrace import LinkTrace, busy_periods, read_trace


def test_parse_tcp_cc() -> None:
    assert DEFAULT_TCP_CC == "cubic"
    assert LinkSpec.parse("1gbit").tcp_cc == "cubic"
    assert LinkSpec().tcp_cc == "cubic"
    assert parse_tcp_cc("Reno") == "reno"
    assert parse_tcp_cc("system") is None
    assert "namespace default" in LinkSpec.parse("1gbit", None, "system").describe_tcp()
    with pytest.raises(ValueError, match="congestion control"):
        parse_tcp_cc("cubic; reboot")


# Rank 1 listens, rank 0 connects. Without SIZE each side prints its
# socket's congestion control; with it rank 0 sends SIZE bytes and rank 1
# prints how many it got.
PEER = r"""
import socket, sys
role, addr = sys.argv[1], sys.argv[2]
size = int(sys.argv[3]) if len(sys.argv) > 3 else 0
if role == "listen":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 29517))
    s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
else:
    c = socket.create_connection((addr, 29517), timeout=10)
if not size:
    print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode(), flush=True)
    c.recv(1) if role == "listen" else c.close()
elif role == "listen":
    got = 0
    while got < size:
        b = c.recv(1 << 20)
        if not b:
            break
        got += len(b)
    print(got, flush=True)
else:
    c.sendall(b"x" * size)
    c.close()
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


def test_busy_periods_find_calls_and_their_idle_links() -> None:
    # Two ranks on 8 Mbit/s links (1000 bytes per ms), sampled every ms.
    # Call 1, 100-300 ms: rank 1 starts 20 ms after rank 0, and rank 0 idles
    # from 260 ms while rank 1 finishes. Call 2, 500-600 ms: both at 60% of
    # the rate throughout.
    def rate(rank: int, t_ms: int) -> int:
        if 100 <= t_ms < 300:
            return 0 if (rank == 1 and t_ms < 120) or (rank == 0 and t_ms >= 260) else 1000
        return 600 if 500 <= t_ms < 600 else 0

    ts = [t / 1000 for t in range(800)]
    up = [[0] * 800 for _ in range(2)]
    for r in range(2):
        for t in range(1, 800):
            up[r][t] = up[r][t - 1] + rate(r, t - 1)
    p1, p2 = busy_periods(ts, up, 8e6)
    assert (p1.ms, p1.head_ms, p1.tail_ms) == pytest.approx((200, 20, 40), abs=5)
    assert p1.mid_util == pytest.approx(1.0, abs=0.03)
    assert p1.mb_per_rank == pytest.approx((0.16 + 0.18) / 2, rel=0.03)
    assert (p2.ms, p2.head_ms, p2.tail_ms) == pytest.approx((100, 0, 0), abs=5)
    assert p2.mid_util == pytest.approx(0.6, abs=0.03)


@pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))
@pytest.mark.timeout(120)
def test_link_trace_sees_what_crosses_each_link(tmp_path) -> None:
    size = 5_000_000  # 0.4 s at 100 Mbit/s
    path = str(tmp_path / "links.csv")
    with Network(2, LinkSpec.parse("100mbit")) as net:
        assert net.mode == "netns", net.reason
        with LinkTrace(net, path) as trace:
            assert trace.active
            sink = subprocess.Popen([*net.command_prefix(1), sys.executable, "-c", PEER, "listen", net.address(1),
                                     str(size)], stdout=subprocess.PIPE, text=True)
            try:
                assert sink.stdout is not None
                assert sink.stdout.readline().strip() == "ready"
                subprocess.run([*net.command_prefix(0), sys.executable, "-c", PEER, "connect", net.address(1),
                                str(size)], check=True, timeout=60)
                assert int(sink.stdout.readline()) == size
                sink.wait(timeout=30)
            finally:
                sink.kill()
    ts, up = read_trace(path)
    sent0, sent1 = up[0][-1] - up[0][0], up[1][-1] - up[1][0]
    assert size <= sent0 < size * 1.1  # payload plus headers
    assert sent1 < size * 0.1  # acks only
    busiest = max(busy_periods(ts, up, 100e6), key=lambda p: p.ms)
    assert busiest.ms == pytest.approx(size * 8 / 100e6 * 1000, rel=0.3)
