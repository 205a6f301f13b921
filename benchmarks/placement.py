"""Placement under churn: how often each policy splits a request across NUMA nodes needlessly.

Replays one seeded stream of exclusive-core requests (sizes 1..k) and
releases on real multi-NUMA machine dumps, every core an exclusive device,
for three policies side by side: ours (``deviceplugin.model.policy``), "first free
core" (lowest IDs, what a plugin without GetPreferredAllocation gets from the
kubelet) and "random". Every policy sees the same random numbers; only its
own choices shape its free cores.

Columns, per policy:

- ``split/fit``: allocations spread over several NUMA nodes although one
  node could have held them, as a share of allocations (target 0 for ours);
- ``no-fit``: allocations for which no single node had room although enough
  cores were free (fragmentation: the Topology Manager's single-numa-node
  policy would reject these pods);
- ``failed``: requests larger than all free cores (same for every policy,
  since each allocation takes exactly its size).

Run: ``python benchmarks/placement.py [--events N] [--seed S]``; the fixture
folder is ``../shared/fixtures/topologies`` or ``$CMK_FIXTURES``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deviceplugin.host.sysfs import discover
from deviceplugin.model.policy import numa_nodes_of, preferred_allocation
from deviceplugin.model.topology import Core
from tests.topologies import FIXTURES

MACHINES = (
    "hwloc-256ppc-8n8s4t",
    "hwloc-64amd64-4s2n4ca2co",
    "hwloc-96em64t-4no4pa3ca2co",
    "hwloc-fakecpuid1f-64intel64-2p4d2n2c2t",
    "hwloc-memorysidecaches",
    "hwloc-128arm-2pa2n8cluster4co",
)
MAX_REQUEST = 8  # cores per request, capped at the largest node so one-node fits exist
RELEASE_SHARE = 0.45  # below 0.5: the node fills up and stays near full, where placement matters

Policy = Callable[[Mapping[str, Core], list[str], int, random.Random], list[str]]


def ours(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
    return preferred_allocation(cores, free, [], size)


def first_free(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
    return sorted(free, key=lambda device: cores[device].first)[:size]


def random_cores(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
    return rng.sample(sorted(free), size)


POLICIES: tuple[tuple[str, Policy], ...] = (("ours", ours), ("first free", first_free), ("random", random_cores))


@dataclass
class Tally:
    allocated: int = 0
    split_with_fit: int = 0
    no_fit: int = 0
    failed: int = 0

    def add(self, other: Tally) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def replay(cores: Mapping[str, Core], policy: Policy, events: int, seed: int, max_request: int) -> Tally:
    stream, choices = random.Random(seed), random.Random(seed + 1)
    free, live, tally = set(cores), [], Tally()
    for _ in range(events):
        release, size, which = stream.random() < RELEASE_SHARE, stream.randint(1, max_request), stream.random()
        if release and live:
            free |= live.pop(int(which * len(live)))
            continue
        if size > len(free):
            tally.failed += 1
            continue
        per_node = Counter(cores[device].node for device in free)
        fits = max(per_node.values()) >= size
        answer = policy(cores, sorted(free), size, choices)
        assert len(answer) == size and set(answer) <= free, "a policy must answer with free cores"
        tally.allocated += 1
        tally.split_with_fit += fits and len(numa_nodes_of(answer, cores)) > 1
        tally.no_fit += not fits
        free -= set(answer)
        live.append(set(answer))
    return tally


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:6.2f}%" if whole else "     -"


def row(label: str, tallies: Sequence[Tally]) -> str:
    cells = [f"{share(t.split_with_fit, t.allocated)} {share(t.no_fit, t.allocated)} {t.failed:6d}" for t in tallies]
    return f"{label:40} " + " | ".join(cells)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="requests and releases per machine and policy")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.monotonic()
    header = " | ".join(f"{name:^28}" for name, _ in POLICIES)
    print(f"{'machine (nodes x cores, k)':40} {header}")
    print(f"{'':40} " + " | ".join(f"{'split/fit':>7} {'no-fit':>7} {'failed':>6}".center(28) for _ in POLICIES))
    totals = [Tally() for _ in POLICIES]
    for machine in MACHINES:
        topology = discover(FIXTURES / machine / "sys", FIXTURES / machine / "proc")
        cores = {f"core{core.first}": core for core in topology.cores}
        per_node = Counter(core.node for core in cores.values())
        if len(per_node) < 2:
            print(f"{machine:40} skipped: one NUMA node")
            continue
        max_request = min(MAX_REQUEST, max(per_node.values()))
        tallies = [replay(cores, policy, args.events, args.seed, max_request) for _, policy in POLICIES]
        for total, tally in zip(totals, tallies):
            total.add(tally)
        shape = f"{len(per_node)}x{max(per_node.values())}, k={max_request}"
        print(row(f"{machine[:40 - len(shape) - 3]} ({shape})", tallies))
    print(row("all machines", totals))
    ours_total = totals[0]
    for (name, _), total in zip(POLICIES[1:], totals[1:]):
        print(f"avoidable splits, {name} vs ours: {total.split_with_fit} vs {ours_total.split_with_fit}; "
              f"no one-node fit: {total.no_fit} vs {ours_total.no_fit} "
              f"({total.no_fit / max(ours_total.no_fit, 1):.1f}x)")
    print(f"{args.events} events per machine and policy, seed {args.seed}, {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
