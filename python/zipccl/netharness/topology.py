"""Hosts of ranks in network namespaces on one bridge, or loopback without
root.

Why namespaces: on loopback every rank shares one 64 KiB-MTU device that
moves tens of Gbit/s, so a compressed collective can never show what it saves
on a real link. Here each host (one rank, unless ``ranks_per_host`` says
more; see layout.py) gets its own stack and its own veth to a bridge, its
NIC, and tc limits each veth end (see shaping.py), so bytes really queue
behind a rate-limited link. The ranks of one host share its namespace: they
share its NIC and reach each other over loopback, as on a real host.

Everything is named after this process and a random tag
(``zipccl-<pid>-<tag>-r<i>`` namespaces, named after the ranks they hold,
``r<i>-<j>`` for several; ``zc<tag>...`` links whose alias records the pid),
so parallel runs never collide and a later run can find and delete what a
crashed one left behind. Teardown runs on normal exit, exceptions, Ctrl-C
and SIGTERM/SIGHUP.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from types import FrameType, TracebackType
from typing import Any

from .layout import HostLayout
from .shaping import LinkSpec, tc_commands

IFNAME = "zceth0"  # the host's interface name inside every namespace
SUBNET = "10.77.0"  # host h is SUBNET.(h+1)/24; namespaces are isolated
ALIAS_PREFIX = "zipccl-netharness pid="
_NS_RE = re.compile(r"^zipccl-(\d+)-([0-9a-f]{6})-r\d+(-\d+)?$")


class NetworkError(RuntimeError):
    """Setting up the namespaces or shaping failed."""


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetworkError(f"`{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _available_tcp_cc() -> str:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _host_ip(host: int) -> str:
    return f"{SUBNET}.{host + 1}"


def _pid_alive(pid: int) -> bool:
    """True if pid is a live process that could own a harness (a python)."""
    if pid == os.getpid():
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"python" in f.read()
    except OSError:
        return False


def netns_unavailable_reason() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces and tc need root (run as root, e.g. with sudo)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (apt-get install iproute2)"
    return None


def cleanup_stale() -> list[str]:
    """Deletes namespaces and links left by harness processes that are gone.
    Returns what it deleted."""
    removed: list[str] = []
    listing = _run(["ip", "netns", "list"], check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NS_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_netns_pids(name)
            if _run(["ip", "netns", "delete", name], check=False).returncode == 0:
                removed.append(name)
    links = _run(["ip", "-j", "link", "show"], check=False).stdout
    try:
        entries = json.loads(links) if links.strip() else []
    except json.JSONDecodeError:
        entries = []
    for link in entries:
        alias = link.get("ifalias") or ""
        if alias.startswith(ALIAS_PREFIX):
            try:
                pid = int(alias[len(ALIAS_PREFIX):].split()[0])
            except (ValueError, IndexError):
                continue
            if not _pid_alive(pid):
                if _run(["ip", "link", "delete", link["ifname"]], check=False).returncode == 0:
                    removed.append(link["ifname"])
    return removed


def _kill_netns_pids(ns: str) -> None:
    out = _run(["ip", "netns", "pids", ns], check=False).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ValueError, OSError):
            pass


class Network:
    """The ranks' network, as a context manager.

    ``Network(4, LinkSpec.parse("1gbit"))`` builds four shaped namespaces,
    one rank each, when it may and loopback when it may not (not root, no
    iproute2: ``mode`` says which and ``reason`` why); ``use_netns=False``
    asks for loopback. ``ranks_per_host=2`` makes it two hosts (namespaces,
    shaped NICs) of two ranks each, ``layout=HostLayout.of_sizes([3, 1])``
    hosts of 3 and 1; loopback only records the layout.
    Failing to build what root may build raises NetworkError.
    """

    def __init__(self, world_size: int, link: LinkSpec = LinkSpec(), use_netns: bool = True,
                 ranks_per_host: int = 1, layout: HostLayout | None = None):
        self.layout = layout or HostLayout.of(world_size, ranks_per_host)
        if self.layout.world_size != world_size:
            raise ValueError(f"{self.layout.describe()} is not {world_size} ranks")
        self.world_size = world_size
        self.hosts = self.layout.hosts
        self.ranks_per_host = self.layout.ranks_per_host
        self.link = link
        self.tag = secrets.token_hex(3)
        self.mode = "loopback"
        self.reason = "asked for loopback (--no-netns)" if not use_netns else ""
        self._want_netns = use_netns
        self._namespaces: list[str] = []
        self._links: list[str] = []
        self._old_handlers: dict[int, Any] = {}
        self.removed_stale: list[str] = []

    # -- names and per-host settings; a rank has its host's ----------------

    def host_of(self, rank: int) -> int:
        return self.layout.host_of(rank)

    def host_namespace(self, host: int) -> str:
        ranks = self.layout.ranks_of(host)
        held = f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
        return f"zipccl-{os.getpid()}-{self.tag}-r{held}"

    def host_address(self, host: int) -> str:
        return _host_ip(host) if self.mode == "netns" else "127.0.0.1"

    def host_end_of_host(self, host: int) -> str | None:
        """The bridge-side end of host's veth (its NIC), in this (the root)
        namespace: what it transmits the host receives, and the reverse.
        None on loopback."""
        return self._veth(host)[0] if self.mode == "netns" else None

    def host_command_prefix(self, host: int) -> list[str]:
        """What runs a command inside host's namespace (nothing on loopback)."""
        return ["ip", "netns", "exec", self.host_namespace(host)] if self.mode == "netns" else []

    def namespace(self, rank: int) -> str:
        return self.host_namespace(self.host_of(rank))

    def address(self, rank: int) -> str:
        return self.host_address(self.host_of(rank))

    def host_end(self, rank: int) -> str | None:
        """The bridge-side end of the veth of rank's host (see
        host_end_of_host)."""
        return self.host_end_of_host(self.host_of(rank))

    def command_prefix(self, rank: int) -> list[str]:
        return self.host_command_prefix(self.host_of(rank))

    @property
    def ifname(self) -> str:
        return IFNAME if self.mode == "netns" else "lo"

    @property
    def nic_per_rank(self) -> bool:
        """True when every rank has a NIC of its own, so its counters count
        that rank's traffic alone (a shared NIC counts its host's ranks
        together, and not what they send each other)."""
        return self.mode == "netns" and self.ranks_per_host == 1

    def _veth(self, host: int) -> tuple[str, str]:
        return f"zc{self.tag}h{host}", f"zc{self.tag}n{host}"

    def rank_env(self, rank: int) -> dict[str, str]:
        """Interface and master address for a rank, for both backends, and
        its place on its host, as torchrun sets it."""
        return {
            "MASTER_ADDR": self.address(0),
            "ZIPCCL_SOCKET_IFNAME": self.ifname,
            "GLOO_SOCKET_IFNAME": self.ifname,
            "LOCAL_RANK": str(self.layout.local_rank(rank)),
            "LOCAL_WORLD_SIZE": str(self.layout.size_of(self.host_of(rank))),
            "GROUP_RANK": str(self.host_of(rank)),
        }

    def describe(self) -> str:
        if self.mode == "netns" and self.ranks_per_host == 1:
            return (
                f"{self.world_size} network namespaces on a bridge, each link "
                f"{self.link.describe()} (tc on both veth ends), {self.link.describe_tcp()}"
            )
        if self.mode == "netns":
            return (
                f"{self.layout.hosts_text()}, each host's NIC {self.link.describe()} "
                f"(a network namespace per host on a bridge, tc on both veth ends; a host's ranks share its NIC "
                f"and reach each other over loopback), {self.link.describe_tcp()}"
            )
        text = f"loopback, unshaped ({self.reason})"
        if self.ranks_per_host > 1:
            text += f"; {self.layout.hosts_text()}, in name only"
        return text

    # -- lifetime -----------------------------------------------------------

    def __enter__(self) -> "Network":
        self._install_signal_handlers()
        try:
            self.setup()
        except BaseException:
            self.teardown()
            self._restore_signal_handlers()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.teardown()
        finally:
            self._restore_signal_handlers()

    def setup(self) -> None:
        if not self._want_netns:
            return
        why = netns_unavailable_reason()
        if why:
            self.reason = why
            return
        self.removed_stale = cleanup_stale()
        try:
            self._build()
        except NetworkError as exc:
            # Root but no network: an error, not a quiet fallback, since the
            # caller asked for shaped links and loopback numbers would mislead.
            self.teardown()
            if "netem" in str(exc) and "unknown" in str(exc):
                raise NetworkError(
                    "a link delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM); "
                    "run without --delay (rate shaping uses tbf) or on a kernel with sch_netem"
                ) from exc
            raise
        self.mode = "netns"

    def _build(self) -> None:
        alias = f"{ALIAS_PREFIX}{os.getpid()}"
        bridge = f"zc{self.tag}br"
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        self._links.append(bridge)
        _run(["ip", "link", "set", bridge, "alias", alias])
        # Bridged frames must not detour through iptables (br_netfilter).
        _run(["ip", "link", "set", bridge, "type", "bridge", "nf_call_iptables", "0"], check=False)
        _run(["ip", "link", "set", bridge, "up"])
        for host in range(self.hosts):
            ns = self.host_namespace(host)
            host_end, ns_end = self._veth(host)
            _run(["ip", "netns", "add", ns])
            self._namespaces.append(ns)
            _run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end])
            self._links.append(host_end)
            _run(["ip", "link", "set", host_end, "alias", alias])
            _run(["ip", "link", "set", ns_end, "netns", ns])
            _run(["ip", "-n", ns, "link", "set", ns_end, "name", IFNAME])
            _run(["ip", "-n", ns, "addr", "add", f"{_host_ip(host)}/24", "dev", IFNAME])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "link", "set", IFNAME, "up"])
            if self.link.tcp_cc:
                # Per route rather than the namespace's default: a namespace
                # may only pick from the root's allowed list, a route may
                # name any congestion control the kernel has.
                try:
                    _run(["ip", "-n", ns, "route", "replace", f"{SUBNET}.0/24", "dev", IFNAME,
                          "congctl", self.link.tcp_cc])
                except NetworkError as exc:
                    raise NetworkError(
                        f"TCP congestion control {self.link.tcp_cc!r} is not available here "
                        f"(the kernel has: {_available_tcp_cc()}); pick one of those with --tcp-cc, "
                        f"or --tcp-cc system: {exc}"
                    ) from exc
            _run(["ip", "link", "set", host_end, "master", bridge])
            _run(["ip", "link", "set", host_end, "up"])
            for args in tc_commands(IFNAME, self.link):
                _run(["ip", "netns", "exec", ns, "tc", *args])
            for args in tc_commands(host_end, self.link):
                _run(["tc", *args])
        self._wait_reachable()

    def _wait_reachable(self, timeout_s: float = 10.0) -> None:
        """Bridge ports start in 'listening' for a moment; wait until every
        host's address answers from host 0 (a TCP connect to a closed port is
        refused fast once the path works)."""
        probe = (
            "import socket,sys\n"
            "s=socket.socket();s.settimeout(0.5)\n"
            "try: s.connect((sys.argv[1],9))\n"
            "except ConnectionRefusedError: sys.exit(0)\n"
            "except OSError: sys.exit(1)\n"
        )
        deadline = time.monotonic() + timeout_s
        # Not host_address(): mode says "netns" only once this has passed.
        for host in range(1, self.hosts):
            while True:
                rc = _run(["ip", "netns", "exec", self.host_namespace(0), sys.executable, "-c", probe,
                           _host_ip(host)], check=False).returncode
                if rc == 0:
                    break
                if time.monotonic() > deadline:
                    raise NetworkError(f"host {host} ({_host_ip(host)}) unreachable from host 0")
                time.sleep(0.2)

    def teardown(self) -> None:
        """Deletes what this Network made; safe to call more than once."""
        for ns in self._namespaces:
            _kill_netns_pids(ns)
        for ns in self._namespaces:
            _run(["ip", "netns", "delete", ns], check=False)
        for link in reversed(self._links):
            _run(["ip", "link", "delete", link], check=False)  # gone with its peer: fine
        self._namespaces.clear()
        self._links.clear()

    # Ctrl-C raises KeyboardInterrupt already; SIGTERM and SIGHUP would kill
    # the process without running `finally`, so turn them into SystemExit.
    def _install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):  # not the main thread
                pass

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError):
                pass
        self._old_handlers.clear()


def nic_bytes(ifname: str = IFNAME) -> tuple[int, int] | None:
    """(tx_bytes, rx_bytes) of an interface as this process's namespace sees
    it, or None. Called inside a rank, it counts what really crossed its
    host's link, headers included, for any backend (with several ranks per
    host, theirs together)."""
    base = f"/sys/class/net/{ifname}/statistics"
    try:
        with open(f"{base}/tx_bytes") as tx, open(f"{base}/rx_bytes") as rx:
            return int(tx.read()), int(rx.read())
    except OSError:
        return None
