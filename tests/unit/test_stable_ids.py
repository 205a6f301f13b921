"""Core device IDs never move: not with a thread offline at start, on any real dump.

The kubelet's checkpoint keeps the IDs it handed out and counts an ID
advertised anew as free, so one renamed core is one core handed out twice.
"""

from __future__ import annotations

import pytest

from deviceplugin.host.sysfs import discover
from deviceplugin.model.devices import core_device_ids, device_tree, legacy_core_cpus
from deviceplugin.model.plan import RESOURCE_NAMES, Pool, plan_pools
from tests.support.topologies import (
    FIXTURES,
    fixture_copy,
    offline_view,
    take_offline_as_the_kernel_does,
)

EXCLUSIVE = RESOURCE_NAMES[Pool.EXCLUSIVE]
DUMPS = sorted(d.name for d in FIXTURES.iterdir() if (d / "sys").is_dir())


def test_xeon_d_core_1_9_keeps_its_id_when_cpu_9_is_offline_at_start(tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11
    online = discover(sysfs, procfs)
    before = device_tree(plan_pools(online), online.online)[EXCLUSIVE]
    take_offline_as_the_kernel_does(sysfs, 9)
    offline = discover(sysfs, procfs)
    assert offline.core_of(1) is not None and offline.core_of(1).cpus == {1}  # the kernel hides CPU 9's place
    after = device_tree(plan_pools(offline), offline.online)[EXCLUSIVE]
    assert list(after.devices) == list(before.devices)
    core_1 = next(i for i, core in before.cores.items() if 1 in core.cpus)
    assert before.cores[core_1].cpus == {1, 9} and after.cores[core_1].cpus == {1}


@pytest.mark.parametrize("name", DUMPS)
def test_every_core_keeps_its_id_whichever_single_thread_is_offline(name):
    topology = discover(FIXTURES / name / "sys", FIXTURES / name / "proc")
    names = core_device_ids(topology.cores)
    assert len(set(names.values())) == len(names)  # unique on every dump, quirks included
    # Exceptions, by reason: a kernel that writes no core_id (the PS3 dump) leaves nothing but the
    # threads to name a core by, so those cores keep the CPU-list name; and where the threads of one
    # kernel core report different core_ids (AMD Bulldozer compute units), the one left online cannot
    # tell the other's. Both kinds are named by their first online thread and move with it.
    smt = [core for core in topology.cores if len(core.cpus) > 1 and core.core_id is not None
           and len({topology.cpus[cpu].core_id for cpu in core.cpus}) == 1]
    for core in smt[:8]:
        for cpu in sorted(core.cpus):
            changed = offline_view(topology, frozenset({cpu}))
            renamed = {frozenset(c.cpus | {cpu} if c.cpus < core.cpus else c.cpus): n
                       for c, n in core_device_ids(changed.cores).items()}
            assert renamed == {frozenset(c.cpus): n for c, n in names.items()}, (name, cpu)
    assert all(names[core].startswith("core-") for core in smt)


def test_ids_of_cores_the_kernel_cannot_tell_apart_are_their_cpus():
    topology = discover(FIXTURES / "hwloc-16ia64-8n2s" / "sys", FIXTURES / "hwloc-16ia64-8n2s" / "proc")
    names = core_device_ids(topology.cores)
    assert names[topology.core_of(0)] == "cpus-0" and names[topology.core_of(1)] == "cpus-1"  # both core_id 0


def test_package_minus_one_is_derived_so_the_id_carries_the_derived_package():
    # POWER reports physical_package_id -1; discovery derives packages from the siblings, as lscpu and hwloc do.
    topology = discover(FIXTURES / "hwloc-256ppc-8n8s4t" / "sys", FIXTURES / "hwloc-256ppc-8n8s4t" / "proc")
    names = core_device_ids(topology.cores)
    assert all(core.package is not None and core.package >= 0 for core in topology.cores)
    assert all(names[core].startswith(f"core-n{core.node}-p{core.package}-") for core in topology.cores)
    assert len({core.package for core in topology.cores}) > 1  # 8 sockets: the derived packages tell them apart


def test_legacy_ids_read_back_as_cpus_and_others_as_none():
    assert legacy_core_cpus("cpus-1.9") == {1, 9}
    assert legacy_core_cpus("cpus-4-7") == {4, 5, 6, 7}
    assert legacy_core_cpus("core-n0-p0-c1") is None
    assert legacy_core_cpus("cpus-x") is None
