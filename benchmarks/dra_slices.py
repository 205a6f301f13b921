"""The ResourceSlices DRA mode publishes, on synthetic machines of 1,024 and 8,192 CPUs: how many, how big, how fast.

``python benchmarks/dra_slices.py [--cpus 1024,8192] [--runs N]`` writes each machine as
``benchmarks/scale.py`` does (its shapes; every NUMA node but the first isolated), discovers
and plans it with the default pool sizes (every isolated core but one exclusive: the most
devices such a node publishes). It prints the slices,
devices, the largest slice's and all slices' JSON size, and the build's p50/p90 (the tree to
slice dicts) beside ``json.dumps`` of them (what the client does next), both in-process; then the
daemon's publish of them (``host/sliceapi.py``) over real TLS to the tests' API server stand-in
(``tests/support/apiserver.py``, in-memory, in this process): the first publish and an unchanged
republish, requests and wall time (the real API server adds its admission and etcd on top).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scale import SHAPES
from benchmarks.synthetic_sysfs import write_synthetic_sysfs
from benchmarks.timing import samples_ms
from deviceplugin.host.sysfs import discover
from deviceplugin.model.node import NodePlan, plan_node
from deviceplugin.model.plan import PlanOptions
from deviceplugin.model.resourceslices import resource_slices, slice_problems
from deviceplugin.model.topology import Topology

NODE = "worker-0"


def plans(topology: Topology) -> dict[str, NodePlan]:
    return {"default pools": plan_node(topology, PlanOptions())}


def p50_p90(samples: list[float]) -> str:
    return f"{statistics.median(samples):.1f} / {statistics.quantiles(samples, n=10)[-1]:.1f}"


def publish_times(slices: list[dict[str, object]], scratch: Path) -> str:
    """``| requests, s first | requests, s again |`` of publishing ``slices`` to a fresh stand-in."""
    import os
    import time

    from deviceplugin.host.kubeapi import KubeApi
    from deviceplugin.host.sliceapi import publish
    from tests.support.apiserver import serve

    scratch.mkdir()
    with serve(scratch) as (store, account, port):
        os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"] = "127.0.0.1", str(port)
        store.put(f"/api/v1/nodes/{NODE}", {"metadata": {"name": NODE}})
        api, cells = KubeApi(account), []
        for _ in range(2):
            before, started = len(store.seen), time.perf_counter()
            publish(api, NODE, slices)
            cells.append(f"{len(store.seen) - before} requests, {time.perf_counter() - started:.2f} s")
    return f"| {cells[0]} | {cells[1]} |"


def measure(cpus: int, runs: int, scratch: Path) -> list[str]:
    sockets, nodes, cores, threads = SHAPES[cpus]
    node0 = {c + t * sockets * nodes * cores for c in range(cores) for t in range(threads)}
    roots = write_synthetic_sysfs(scratch / str(cpus), sockets, nodes, cores, threads,
                                  isolated=sorted(set(range(cpus)) - node0))
    topology = discover(roots.sysfs, roots.procfs)
    rows = []
    for name, node in plans(topology).items():
        def build(n: NodePlan = node) -> list[dict[str, object]]:
            return resource_slices(n.tree, topology.isolated, node_name=NODE, generation=1)
        slices = build()
        problems = [p for s in slices for p in slice_problems(s)]
        if problems:
            raise SystemExit(f"{cpus} CPUs, {name}: {problems[0]}")
        sizes = [len(json.dumps(s)) for s in slices]
        devices = sum(len(s["spec"]["devices"]) for s in slices)  # type: ignore[index]
        build_ms = samples_ms(build, runs, warmup=1)
        dump_ms = samples_ms(lambda s=slices: [json.dumps(x) for x in s], runs, warmup=1)
        rows.append(f"| {cpus:,} | {name} | {len(slices)} | {devices:,} | {max(sizes) / 1024:.1f} KiB "
                    f"| {sum(sizes) / 1024:.0f} KiB | {p50_p90(build_ms)} | {p50_p90(dump_ms)} "
                    + publish_times(slices, scratch / f"api-{cpus}"))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/dra_slices.py", description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="1024,8192", help="comma-separated machine sizes from benchmarks/scale.py")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.cpus.split(",")]
    unknown = [n for n in sizes if n not in SHAPES]
    if unknown:
        print(f"no synthetic shape for {unknown}; known: {', '.join(map(str, SHAPES))}", file=sys.stderr)
        return 2
    print("| CPUs | plan | slices | devices | largest slice | all slices | build ms p50/p90 | json.dumps ms p50/p90 "
          "| first publish | unchanged republish |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="cmk-bench-dra-", dir=root) as scratch:
        for cpus in sizes:
            for row in measure(cpus, args.runs, Path(scratch)):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
