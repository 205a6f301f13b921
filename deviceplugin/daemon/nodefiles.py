"""The node files the daemon writes once at start, before serving, and keeps when it stops.

The CDI spec (its hook confines containers holding our devices) and the
node-wide hook's infra record. Both follow from the plan alone, so hotplug
never rewrites them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from deviceplugin.events import EventLog
from deviceplugin.host import cdi
from deviceplugin.model import cdispec
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.devices import DeviceTree, core_device_ids
from deviceplugin.model.plan import Pool, PoolPlan
from deviceplugin.model.topology import Core

events = EventLog(__name__)


def write_cdi_spec(cdi_dir: Path, install_dir: str, plan: PoolPlan, tree: DeviceTree, *,
                   unthrottle_exclusive: bool, core_ids: Mapping[Core, str] | None = None) -> None:
    """A device per core of the node and per slot pool, and every device the spec on disk had (its CPUs only).

    Served or not: a checkpointed answer may name a core or pool this plan
    moved or dropped. ``core_ids``: the plan's cores' device IDs, where named already.
    """
    names = core_device_ids(plan.all_cores) if core_ids is None else core_ids
    cores = {name: core.cpus for core, name in names.items()}
    exclusive = cdispec.exclusive_devices(tree) if unthrottle_exclusive else frozenset()
    devices = cdispec.spec_devices(tree, cores)
    on_disk = cdi.read_spec(cdi_dir)
    devices |= cdispec.kept_cpus(on_disk, cdispec.KIND, devices)  # rebuilt with our hook
    hook = cdispec.hook_path(install_dir)
    spec = cdispec.build_spec(devices, hook, exclusive)
    path = cdi.write_spec(spec, cdi_dir, on_disk=on_disk)  # unchanged: left as it is
    listed = tuple(d["name"] for d in spec["devices"])
    events.info("cdi_spec_written", f"CDI spec {path}: {len(listed)} devices ({', '.join(listed)}), hook {hook} "
                "(kept when the daemon stops)", path=str(path), devices=listed, hook=hook)


def write_infra_record(record_dir: Path, plan: PoolPlan) -> None:
    """The infra CPUs for the node-wide hook, rewritten only if the plan changed them.

    ``cmk install`` (the DaemonSet's init container) wrote it from the same plan, so the daemon's
    read-only mount of the install dir normally needs no write; if it cannot, the node-wide hook
    keeps the older record, which the warning names.
    """
    from deviceplugin.host import nodewide

    infra = plan.cpus(Pool.INFRA)
    path = nodewide.record_path(record_dir)
    try:
        written = nodewide.write_record(record_dir, infra)
    except OSError as err:
        events.warning("infra_record_unwritten", f"cannot write the node-wide hook's infra record {path}: {err.strerror}: "
                       "containers holding no pool keep the CPUs of the record as it is (run cmk install with this plan)",
                       path=str(path), reason=str(err.strerror))
        return
    cpus = format_cpu_list(infra)
    events.info("infra_record_written", f"infra record {path}: {cpus} ({'written' if written else 'unchanged'})",
                path=str(path), cpus=cpus, changed=written)
