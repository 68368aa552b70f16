"""``python -m zipccl bench groups``: what creating process groups costs,
zipccl against gloo in the same run.

Every rank creates the groups Megatron-LM's ``initialize_model_parallel``
creates for the given TP and PP sizes (data, tensor, model, pipeline,
embedding, their combinations; each in every rank's program order, as
``torch.distributed.new_group`` requires), then ``--subgroups`` plain
groups of alternating halves of the world. The table gives, per backend,
the time to create them all on the slowest rank, and the slowest single
``new_group`` call on any rank: a stall in one rank's creation shows there
even when the sum hides it.

Runs on loopback (group creation sends no tensor bytes); run it with
``python -m zipccl.bench.groups`` on each rank to use it elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

RESULT = "GROUPS "


def megatron_groups(world: int, tp: int, pp: int) -> list[tuple[str, list[list[int]]]]:
    """The rank lists of Megatron's groups for world = tp * dp * pp (order
    tp-dp-pp: the tensor-parallel ranks are adjacent), by kind, in the order
    initialize_model_parallel creates them."""
    if world % (tp * pp):
        raise ValueError(f"world {world} is not a multiple of tp {tp} * pp {pp}")
    dp = world // (tp * pp)

    def rank(t: int, d: int, p: int) -> int:
        return t + tp * (d + dp * p)

    data = [[rank(t, d, p) for d in range(dp)] for p in range(pp) for t in range(tp)]
    pipe = [[rank(t, d, p) for p in range(pp)] for d in range(dp) for t in range(tp)]
    return [
        ("data", data),
        ("data-with-context", data),
        ("tensor-and-data", [[rank(t, d, p) for t in range(tp) for d in range(dp)] for p in range(pp)]),
        ("tensor", [[rank(t, d, p) for t in range(tp)] for p in range(pp) for d in range(dp)]),
        ("model", [[rank(t, d, p) for t in range(tp) for p in range(pp)] for d in range(dp)]),
        ("pipeline", pipe),
        ("embedding", pipe),
        ("position-embedding", [[g[0]] for g in pipe]),
    ]


def _rank_main(argv: list[str]) -> int:
    import datetime

    import torch.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("backend")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--subgroups", type=int, default=100)
    args = p.parse_args(argv)
    if args.backend == "zipccl":
        import zipccl  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    world = dist.get_world_size()
    lists = [g for _, gs in megatron_groups(world, args.tp, args.pp) for g in gs]
    lists += [list(range(i % 2, world, 2)) for i in range(args.subgroups)]
    times = []
    start = time.perf_counter()
    for ranks in lists:
        t0 = time.perf_counter()
        dist.new_group(ranks)
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    print(RESULT + json.dumps({"rank": dist.get_rank(), "groups": len(lists), "total_s": total,
                               "max_s": max(times), "slowest_call": times.index(max(times))}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-size", "-n", type=int, default=8, help="ranks (default 8)")
    p.add_argument("--tp", type=int, default=2, help="Megatron's tensor-parallel size (default 2)")
    p.add_argument("--pp", type=int, default=2, help="Megatron's pipeline-parallel size (default 2)")
    p.add_argument("--subgroups", type=int, default=100, help="plain groups created after Megatron's (default 100)")
    p.add_argument("--backends", default="gloo,zipccl", help="comma list, run one after another (default gloo,zipccl)")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs per backend; the median is reported (default 3)")


def run(args: argparse.Namespace) -> int:
    from ..netharness import LinkSpec, Network, RanksFailed, launch_ranks

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    megatron_groups(args.world_size, args.tp, args.pp)  # validates the sizes
    got: dict[str, list[list[dict[str, Any]]]] = {b: [] for b in backends}
    for _ in range(args.rounds):
        for b in backends:
            rows: list[dict[str, Any]] = []

            def on_line(rank: int, line: str) -> None:
                if line.startswith(RESULT):
                    rows.append(json.loads(line[len(RESULT):]))

            argv = ["-m", "zipccl.bench.groups", b, "--tp", str(args.tp), "--pp", str(args.pp),
                    "--subgroups", str(args.subgroups)]
            try:
                with Network(args.world_size, LinkSpec(), use_netns=False) as net:
                    launch_ranks(net, argv, on_line=on_line, timeout_s=600, pin=False)
            except RanksFailed as exc:
                print(f"zipccl bench groups: {b}: {exc}", file=sys.stderr)
                return 1
            got[b].append(rows)
    n = got[backends[0]][0][0]["groups"]
    print(f"{args.world_size} ranks, tp {args.tp}, pp {args.pp}: {n} new_group calls per rank "
          f"(Megatron's, then {args.subgroups} plain); median of {args.rounds} runs")
    print(f"{'backend':<10} {'all groups, slowest rank':>26} {'slowest new_group, any rank':>29}")
    med = {}
    for b in backends:
        totals = sorted(max(r["total_s"] for r in rows) for rows in got[b])
        worst = sorted(max(r["max_s"] for r in rows) for rows in got[b])
        med[b] = (totals[len(totals) // 2], worst[len(worst) // 2])
        print(f"{b:<10} {med[b][0] * 1e3:>23.1f} ms {med[b][1] * 1e3:>26.1f} ms")
    if "gloo" in med and "zipccl" in med:
        print(f"zipccl / gloo: {med['zipccl'][0] / med['gloo'][0]:.2f}x the time to create them all")
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
