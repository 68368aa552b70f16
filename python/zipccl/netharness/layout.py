"""Where ranks run: hosts of several ranks, as on a real cluster.

Ranks are placed host-major, as torchrun numbers them (rank = node_rank *
nproc_per_node + local_rank): ranks ``h*R .. h*R+R-1`` run on host ``h``.
Each host has one NIC, which its ranks share; ranks of one host reach each
other without it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class HostLayout:
    """``hosts`` hosts of ``ranks_per_host`` ranks each, host-major; or,
    with ``sizes`` (``HostLayout.of_sizes``), hosts of those numbers of
    ranks (``ranks_per_host`` is then the largest)."""

    hosts: int
    ranks_per_host: int = 1
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.hosts < 1:
            raise ValueError(f"hosts must be at least 1, not {self.hosts}")
        if self.ranks_per_host < 1:
            raise ValueError(f"ranks_per_host must be at least 1, not {self.ranks_per_host}")
        if self.sizes and (len(self.sizes) != self.hosts or max(self.sizes) != self.ranks_per_host
                           or min(self.sizes) < 1):
            raise ValueError(f"host sizes {self.sizes} disagree with {self.hosts} hosts of up to "
                             f"{self.ranks_per_host} ranks")

    @classmethod
    def of_sizes(cls, sizes: "list[int] | tuple[int, ...]") -> "HostLayout":
        """Hosts of the given numbers of ranks, in host order (``[3, 1]``:
        ranks 0-2 on host 0, rank 3 on host 1)."""
        sizes = tuple(int(n) for n in sizes)
        if not sizes or min(sizes) < 1:
            raise ValueError(f"host sizes must be at least 1 each, not {list(sizes)}")
        if len(set(sizes)) == 1:
            return cls(len(sizes), sizes[0])
        return cls(len(sizes), max(sizes), sizes)

    @classmethod
    def parse_sizes(cls, text: str) -> "HostLayout":
        """``--host-sizes 3,1``."""
        try:
            return cls.of_sizes([int(x) for x in text.split(",") if x.strip()])
        except ValueError as exc:
            raise ValueError(f"--host-sizes {text!r}: {exc}") from None

    @property
    def equal(self) -> bool:
        """Every host holds as many ranks."""
        return not self.sizes

    def size_of(self, host: int) -> int:
        """The number of ranks on host."""
        return self.sizes[host] if self.sizes else self.ranks_per_host

    def sizes_text(self) -> str:
        """'3,1' for hosts of 3 and 1 ranks, '2' for hosts of 2 each (the
        benchmark CSV's ranks_per_host for hosts of different sizes)."""
        return ",".join(map(str, self.sizes)) if self.sizes else str(self.ranks_per_host)

    @classmethod
    def of(cls, world_size: int, ranks_per_host: int = 1) -> "HostLayout":
        """world_size ranks, ranks_per_host on each host."""
        if world_size < 1:
            raise ValueError("world_size must be at least 1")
        if ranks_per_host < 1:
            raise ValueError(f"ranks_per_host must be at least 1, not {ranks_per_host}")
        if world_size % ranks_per_host:
            raise ValueError(f"world_size {world_size} is not a multiple of ranks_per_host {ranks_per_host}: "
                             "every host runs the same number of ranks")
        return cls(world_size // ranks_per_host, ranks_per_host)

    @classmethod
    def from_args(cls, world_size: int | None, hosts: int | None, ranks_per_host: int | None,
                  default_world_size: int, host_sizes: str | None = None) -> "HostLayout":
        """The layout a command line asks for with ``--world-size``,
        ``--hosts`` and ``--ranks-per-host``, or ``--host-sizes`` (None: not
        given). World size alone keeps its old meaning, one rank per host;
        hosts alone, one rank each unless the world size says otherwise."""
        if host_sizes is not None:
            if hosts is not None or ranks_per_host is not None:
                raise ValueError("--host-sizes replaces --hosts and --ranks-per-host; give one or the other")
            layout = cls.parse_sizes(host_sizes)
            if world_size is not None and world_size != layout.world_size:
                raise ValueError(f"--world-size {world_size} disagrees with --host-sizes {host_sizes}")
            return layout
        for flag, value in (("--world-size", world_size), ("--hosts", hosts), ("--ranks-per-host", ranks_per_host)):
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be at least 1, not {value}")
        if hosts is not None and ranks_per_host is not None:
            if world_size is not None and world_size != hosts * ranks_per_host:
                raise ValueError(f"--world-size {world_size} disagrees with --hosts {hosts} x --ranks-per-host "
                                 f"{ranks_per_host} = {hosts * ranks_per_host} ranks; give one or the other")
            return cls(hosts, ranks_per_host)
        if hosts is not None:
            if world_size is None:
                return cls(hosts)
            if world_size % hosts:
                raise ValueError(f"--world-size {world_size} does not split evenly over --hosts {hosts}")
            return cls(hosts, world_size // hosts)
        world = default_world_size if world_size is None else world_size
        per_host = ranks_per_host or 1
        if world % per_host:
            raise ValueError(f"--world-size {world} is not a multiple of --ranks-per-host {per_host}")
        return cls(world // per_host, per_host)

    @property
    def world_size(self) -> int:
        return sum(self.sizes) if self.sizes else self.hosts * self.ranks_per_host

    def host_of(self, rank: int) -> int:
        self._check_rank(rank)
        if not self.sizes:
            return rank // self.ranks_per_host
        return next(h for h in range(self.hosts) if rank in self.ranks_of(h))

    def local_rank(self, rank: int) -> int:
        return rank - self.ranks_of(self.host_of(rank))[0]

    def ranks_of(self, host: int) -> range:
        if not 0 <= host < self.hosts:
            raise ValueError(f"host {host} is not in 0..{self.hosts - 1}")
        if not self.sizes:
            return range(host * self.ranks_per_host, (host + 1) * self.ranks_per_host)
        start = sum(self.sizes[:host])
        return range(start, start + self.sizes[host])

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is not in 0..{self.world_size - 1}")

    def describe(self) -> str:
        """'4 ranks' with one rank per host (each rank a host), else '4 ranks
        (2 hosts of 2 ranks)'."""
        if self.ranks_per_host == 1:
            return f"{self.world_size} ranks"
        return f"{self.world_size} ranks ({self.hosts_text()})"

    def hosts_text(self) -> str:
        """'2 hosts of 2 ranks', or 'hosts of 3 + 1 ranks'."""
        if self.sizes:
            return f"hosts of {' + '.join(map(str, self.sizes))} ranks"
        return f"{self.hosts} hosts of {self.ranks_per_host} ranks"


def add_layout_arguments(p: argparse.ArgumentParser, default_world_size: int) -> None:
    """``--world-size``, ``--hosts`` and ``--ranks-per-host``, for
    ``HostLayout.from_args``."""
    p.add_argument("--world-size", "-n", type=int, default=None,
                   help=f"ranks (default {default_world_size}, or hosts x ranks-per-host); alone, one rank per host")
    p.add_argument("--hosts", type=int, default=None,
                   help="emulated hosts, each one network namespace with one shaped NIC (default: one per rank)")
    p.add_argument("--host-sizes", default=None, metavar="N,N,...",
                   help="hosts of these numbers of ranks, host-major (e.g. 3,1); instead of the three above")
    p.add_argument("--ranks-per-host", type=int, default=None,
                   help="ranks on each host (default 1): they share the host's NIC and reach each other over "
                        "loopback; ranks are numbered host-major, as torchrun does")
