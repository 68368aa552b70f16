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
    """``hosts`` hosts of ``ranks_per_host`` ranks each, host-major."""

    hosts: int
    ranks_per_host: int = 1

    def __post_init__(self) -> None:
        if self.hosts < 1:
            raise ValueError(f"hosts must be at least 1, not {self.hosts}")
        if self.ranks_per_host < 1:
            raise ValueError(f"ranks_per_host must be at least 1, not {self.ranks_per_host}")

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
                  default_world_size: int) -> "HostLayout":
        """The layout a command line asks for with ``--world-size``,
        ``--hosts`` and ``--ranks-per-host`` (None: not given). World size
        alone keeps its old meaning, one rank per host; hosts alone, one
        rank each unless the world size says otherwise."""
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
        return self.hosts * self.ranks_per_host

    def host_of(self, rank: int) -> int:
        self._check_rank(rank)
        return rank // self.ranks_per_host

    def local_rank(self, rank: int) -> int:
        self._check_rank(rank)
        return rank % self.ranks_per_host

    def ranks_of(self, host: int) -> range:
        if not 0 <= host < self.hosts:
            raise ValueError(f"host {host} is not in 0..{self.hosts - 1}")
        return range(host * self.ranks_per_host, (host + 1) * self.ranks_per_host)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is not in 0..{self.world_size - 1}")

    def describe(self) -> str:
        """'4 ranks' with one rank per host (each rank a host), else '4 ranks
        (2 hosts of 2 ranks)'."""
        if self.ranks_per_host == 1:
            return f"{self.world_size} ranks"
        return f"{self.world_size} ranks ({self.hosts} hosts of {self.ranks_per_host} ranks)"


def add_layout_arguments(p: argparse.ArgumentParser, default_world_size: int) -> None:
    """``--world-size``, ``--hosts`` and ``--ranks-per-host``, for
    ``HostLayout.from_args``."""
    p.add_argument("--world-size", "-n", type=int, default=None,
                   help=f"ranks (default {default_world_size}, or hosts x ranks-per-host); alone, one rank per host")
    p.add_argument("--hosts", type=int, default=None,
                   help="emulated hosts, each one network namespace with one shaped NIC (default: one per rank)")
    p.add_argument("--ranks-per-host", type=int, default=None,
                   help="ranks on each host (default 1): they share the host's NIC and reach each other over "
                        "loopback; ranks are numbered host-major, as torchrun does")
