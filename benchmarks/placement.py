"""Placement under churn: needless NUMA and L3 splits, ours beside the kubelet's static policy and best-fit.

Replays one seeded stream of exclusive-core requests at 85 % offered load
(Poisson arrivals, exponential lifetimes, sizes 1..k cores) on synthetic
machines with two L3 groups per NUMA node and on SNC-2, and on every
multi-NUMA machine dump. Every core is an exclusive device. A request larger
than all free cores is blocked; that depends only on counts, so every
algorithm sees the same accepted requests and releases, and only its own
choices shape its free cores.

Algorithms: ours (``deviceplugin.model.policy``), a best-fit greedy over L3 groups
(the L3 group with the fewest free cores that holds the request, else the
largest groups first), the kubelet's static CPU manager policy
(``benchmarks/kubelet_static.py``) without and with the Topology Manager
(``best-effort``) and with ``prefer-align-cpus-by-uncorecache``, and random
cores (a plugin without GetPreferredAllocation).

Columns, per algorithm, counted after a warm-up of a tenth of the arrivals:

- ``NUMA regret``: allocations spread over several NUMA nodes although one
  node had room for all of them (target 0 for ours);
- ``L3 regret``: allocations spread over several L3 groups although one
  group had room (target 0 for ours);
- ``NUMA fit``/``L3 fit``: share of allocations placed inside one NUMA node
  / one L3 group: how well earlier choices kept room for later requests.

Run: ``python benchmarks/placement.py [--events N] [--seed S] [--only NAME]``;
the fixture folder is ``../shared/fixtures/topologies`` or ``$CMK_FIXTURES``.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kubelet_static import CpuTopology, Unsupported, kubelet_choice
from benchmarks.synthetic_sysfs import write_synthetic_sysfs
from deviceplugin.host.sysfs import discover
from deviceplugin.model.policy import preferred_allocation
from deviceplugin.model.topology import Core
from tests.support.topologies import FIXTURES

#: sockets, NUMA nodes per socket, L3 groups per node, cores per L3 group, threads per core
SYNTHETIC = ("1,4,2,8,2", "2,4,2,4,2", "2,2,1,12,2")
MAX_REQUEST = 8  # cores per request, capped at the largest node so one-node fits exist
OFFERED_LOAD = 0.85

Choice = Callable[[Mapping[str, Core], list[str], int, random.Random], list[str]]


def node_key(core: Core) -> int:
    return core.node if core.node is not None else -1


def l3_key(core: Core) -> int:
    return min(core.l3) if core.l3 else -1


def ours(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
    return preferred_allocation(cores, free, [], size)


def best_fit_l3(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
    """The L3 group with the fewest free cores that holds the rest, else the one with the most; repeat."""
    groups: dict[int, list[str]] = defaultdict(list)
    for device in sorted(free, key=lambda d: cores[d].first):
        groups[l3_key(cores[device])].append(device)
    chosen: list[str] = []
    while len(chosen) < size:
        need = size - len(chosen)
        fitting = [group for group, members in groups.items() if len(members) >= need]
        group = (min(fitting, key=lambda g: (len(groups[g]), g)) if fitting
                 else min(groups, key=lambda g: (-len(groups[g]), g)))
        chosen += groups.pop(group)[:need]
    return chosen


def random_cores(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
    return rng.sample(sorted(free), size)


def kubelet(topology_manager: bool, uncore: bool) -> Choice:
    topologies: dict[int, CpuTopology] = {}

    def choose(cores: Mapping[str, Core], free: list[str], size: int, rng: random.Random) -> list[str]:
        topo = topologies.setdefault(id(cores), CpuTopology.of(cores.values()))
        return kubelet_choice(cores, topo, free, size, topology_manager=topology_manager, uncore=uncore)

    return choose


ALGORITHMS: tuple[tuple[str, Choice], ...] = (
    ("ours", ours),
    ("best-fit L3", best_fit_l3),
    ("kubelet static", kubelet(topology_manager=False, uncore=False)),
    ("kubelet static + TM", kubelet(topology_manager=True, uncore=False)),
    ("kubelet + uncorecache", kubelet(topology_manager=False, uncore=True)),
    ("kubelet + TM + uncorecache", kubelet(topology_manager=True, uncore=True)),
    ("random", random_cores),
)


@dataclass
class Tally:
    allocated: int = 0
    numa_regret: int = 0
    l3_regret: int = 0
    in_one_node: int = 0
    in_one_l3: int = 0
    blocked: int = 0

    def add(self, other: Tally) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class Request:
    arrival: float
    lifetime: float
    size: int


def churn(cores: int, max_request: int, events: int, seed: int) -> list[Request]:
    """Poisson arrivals and exponential lifetimes (mean 1) whose offered load is 85 % of the cores."""
    rng = random.Random(seed)
    rate = OFFERED_LOAD * cores / ((1 + max_request) / 2)
    now, stream = 0.0, []
    for _ in range(events):
        now += rng.expovariate(rate)
        stream.append(Request(now, rng.expovariate(1.0), rng.randint(1, max_request)))
    return stream


def replay(cores: Mapping[str, Core], choose: Choice, stream: Sequence[Request], seed: int) -> Tally | str:
    """Count one algorithm's regrets and fits, or say why it cannot run on this machine."""
    rng = random.Random(seed + 1)
    free, tally = set(cores), Tally()
    running: list[tuple[float, int, set[str]]] = []
    warmup = len(stream) // 10
    for index, request in enumerate(stream):
        while running and running[0][0] <= request.arrival:
            free |= heapq.heappop(running)[2]
        if request.size > len(free):
            tally.blocked += index >= warmup
            continue
        per_node = Counter(node_key(cores[d]) for d in free)
        per_l3 = Counter(l3_key(cores[d]) for d in free)
        try:
            answer = choose(cores, sorted(free), request.size, rng)
        except Unsupported as error:
            return f"n/a: {error}"
        assert len(set(answer)) == request.size and set(answer) <= free, "an algorithm must answer with free cores"
        if index >= warmup:
            one_node = len({node_key(cores[d]) for d in answer}) == 1
            one_l3 = len({l3_key(cores[d]) for d in answer}) == 1
            tally.allocated += 1
            tally.in_one_node += one_node
            tally.in_one_l3 += one_l3
            tally.numa_regret += not one_node and max(per_node.values()) >= request.size
            tally.l3_regret += not one_l3 and max(per_l3.values()) >= request.size
        free -= set(answer)
        heapq.heappush(running, (request.arrival + request.lifetime, index, set(answer)))
    return tally


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:6.2f}%" if whole else "      -"


def row(label: str, tally: Tally | str) -> str:
    if isinstance(tally, str):
        return f"  {label:28} {tally}"
    return (f"  {label:28} {tally.numa_regret:>11} {tally.l3_regret:>9} "
            f"{share(tally.in_one_node, tally.allocated):>9} {share(tally.in_one_l3, tally.allocated):>8}")


def synthetic(spec: str, folder: Path) -> dict[str, Core]:
    sockets, nodes, l3, per_l3, threads = (int(part) for part in spec.split(","))
    roots = write_synthetic_sysfs(folder / spec, sockets, nodes, l3 * per_l3, threads, l3_per_node=l3)
    return {f"core{core.first}": core for core in discover(roots.sysfs, roots.procfs).cores}


def dump(name: str) -> dict[str, Core]:
    topology = discover(FIXTURES / name / "sys", FIXTURES / name / "proc")
    return {f"core{core.first}": core for core in topology.cores}


def machines(folder: Path, only: str | None) -> list[tuple[str, dict[str, Core]]]:
    """Every synthetic machine and every dump with more than one NUMA node group."""
    found = [(f"synthetic {spec}", synthetic(spec, folder)) for spec in SYNTHETIC]
    for path in sorted(FIXTURES.iterdir()):
        if (path / "sys").is_dir():
            cores = dump(path.name)
            if len({node_key(core) for core in cores.values()}) > 1:
                found.append((path.name, cores))
    return [(name, cores) for name, cores in found if only is None or only in name]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3_000, help="arrivals per machine")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="machines whose name contains this text")
    args = parser.parse_args(argv)
    if args.events < 10:
        parser.error(f"--events {args.events} is too few; give at least 10 arrivals")
    started = time.monotonic()
    totals = {name: Tally() for name, _ in ALGORITHMS}
    ran = Counter[str]()
    ours_ok, fit_ok, count = True, True, 0
    with tempfile.TemporaryDirectory() as folder:
        found = machines(Path(folder), args.only)
    if not found:
        print(f"placement.py: no machine matches --only {args.only!r}", file=sys.stderr)
        return 2
    for name, cores in found:
        per_node = Counter(node_key(core) for core in cores.values())
        per_l3 = Counter(l3_key(core) for core in cores.values())
        max_request = min(MAX_REQUEST, max(per_node.values()))
        stream = churn(len(cores), max_request, args.events, args.seed)
        tallies = {label: replay(cores, choose, stream, args.seed) for label, choose in ALGORITHMS}
        first = next(t for t in tallies.values() if isinstance(t, Tally))
        print(f"{name}: {len(per_node)} nodes, {len(per_l3)} L3 groups, {len(cores)} cores, k={max_request}; "
              f"{first.allocated} allocations, {first.blocked} blocked")
        print(f"  {'algorithm':28} {'NUMA regret':>11} {'L3 regret':>9} {'NUMA fit':>9} {'L3 fit':>8}")
        for label, tally in tallies.items():
            print(row(label, tally))
            if isinstance(tally, Tally):
                totals[label].add(tally)
                ran[label] += 1
        mine, best_fit = tallies["ours"], tallies["best-fit L3"]
        assert isinstance(mine, Tally) and isinstance(best_fit, Tally)
        ours_ok &= mine.numa_regret == 0 and mine.l3_regret == 0
        fit_ok &= mine.in_one_node >= best_fit.in_one_node
        count += 1
    print(f"all {count} machines")
    print(f"  {'algorithm':28} {'NUMA regret':>11} {'L3 regret':>9} {'NUMA fit':>9} {'L3 fit':>8}")
    for label, total in totals.items():
        print(row(f"{label} ({ran[label]})", total))
    print(f"ours: {'0' if ours_ok else 'NOT 0'} regret at both levels on every machine; NUMA fit "
          f"{'at least' if fit_ok else 'NOT always at least'} best-fit L3's on every machine")
    print(f"{args.events} arrivals per machine at {OFFERED_LOAD:.0%} offered load, seed {args.seed}, "
          f"{time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
