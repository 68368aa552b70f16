"""Which ranks of a group share a host, and the per-host subgroups.

A host is one machine and one network namespace (backend/hosts): its ranks
reach each other through memory and share one NIC to the other hosts, as
the GPUs of one node do.
"""

from __future__ import annotations

import json
from typing import Any

import torch.distributed as dist

_KEY = "zipccl/host_groups/"

# host_groups' calls so far in this process (the same on every rank, since
# every rank of the default group makes each call), and this rank's
# subgroups per group, keyed by the group's global ranks.
_calls = 0
_made: dict[tuple[int, ...], tuple[Any, Any]] = {}


def topology(group: Any = None) -> list[list[int]]:
    """The group's ranks (group ranks) grouped by host: hosts in the order
    of their lowest rank, each host's ranks ascending. The first call per
    group reads every rank's host from the group's Store, waiting up to the
    group's timeout for ranks that have not created it yet."""
    from . import _runtime, _zipccl_backend

    return json.loads(_runtime()._hosts(_zipccl_backend(group)))


def host_groups(group: Any = None) -> tuple[Any, Any]:
    """Creates the two subgroups DeepSpeed calls local and global: this
    rank's host (intra), and the ranks with this rank's local index on every
    host (inter), as zipccl groups over global ranks. Collective over the
    default group, like ``new_group``: every rank of the default group
    calls it with its handle of the group (``None`` for the default group;
    a rank outside a subgroup passes what ``new_group`` gave it) in the
    same order; a rank outside the group gets non-member handles. Made once
    per group; later calls return the same subgroups. Hosts of unequal size
    work: a local index that only some hosts have makes a smaller inter
    group."""
    global _calls
    store = dist.distributed_c10d._get_default_store()
    key = f"{_KEY}{_calls}"
    _calls += 1
    member = group is None or group is not dist.GroupMember.NON_GROUP_MEMBER
    if member:
        ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
        if dist.get_rank() == min(ranks):
            # the lowest member tells every rank, members or not, which
            # subgroups to make (non-members cannot ask the group)
            hosts = [[ranks[r] for r in host] for host in topology(group)]
            store.set(key, json.dumps({"ranks": ranks, "hosts": hosts, "backend": dist.get_backend(group)}))
    plan = json.loads(store.get(key))
    ranks_key = tuple(plan["ranks"])
    if ranks_key not in _made:
        _made[ranks_key] = _make(plan["hosts"], plan["backend"])
    return _made[ranks_key]


def _make(hosts: list[list[int]], backend: str) -> tuple[Any, Any]:
    """Creates every host's group, then every local index's, in that order
    on every rank (torch's rule for new_group); returns this rank's two."""
    local = max(len(h) for h in hosts)
    inter = [[h[i] for h in hosts if i < len(h)] for i in range(local)]
    mine = [dist.GroupMember.NON_GROUP_MEMBER] * 2
    for kind, ranks in [(0, h) for h in hosts] + [(1, g) for g in inter]:
        g = dist.new_group(ranks, backend=backend)
        if dist.get_rank() in ranks:
            mine[kind] = g
    return mine[0], mine[1]


def host_mesh(device_type: str = "cpu") -> Any:
    """A 2-D ``DeviceMesh`` of the default group, dimensions ``("host",
    "local")``: row h is host h's ranks. FSDP2 shards over ``"local"`` and
    replicates over ``"host"`` (HSDP), so parameter all-gathers stay inside
    a host. Collective over the default group; the hosts must hold equal
    numbers of ranks (a mesh is a rectangle)."""
    from torch.distributed.device_mesh import DeviceMesh

    hosts = topology(None)
    if len({len(h) for h in hosts}) != 1:
        raise ValueError(f"zipccl.host_mesh: the hosts hold different numbers of ranks ({hosts}); "
                         "a device mesh needs equal hosts")
    return DeviceMesh(device_type, hosts, mesh_dim_names=("host", "local"))
