"""The daemon's settings (passed down, never global) and the protocol checks a node plan must pass to be served."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from api.constants import (
    DEVICE_PLUGIN_DIR,
    PLUGINS_DIR,
    PLUGINS_REGISTRY_DIR,
    validate_device_id,
    validate_resource_name,
)
from deviceplugin.errors import CmkError
from deviceplugin.host.installedpinner import DEFAULT_INSTALL_DIR
from deviceplugin.host.irqs import DEFAULT_IRQ_DIR, DEFAULT_IRQBALANCE_DIR
from deviceplugin.host.sysfs import DEFAULT_PROCFS_ROOT, DEFAULT_SYSFS_ROOT
from deviceplugin.model.devices import DeviceTree
from deviceplugin.model.modes import ServingMode
from deviceplugin.model.plan import PlanOptions, Pool
from deviceplugin.protocol.server import (
    list_message_problem,
    list_message_wire,
    socket_path_problem,
)


@dataclass(frozen=True, kw_only=True)
class DaemonSettings:
    """What the daemon runs with. Defaults are the flags' (``tests/unit/test_flag_table.py`` holds them equal)."""

    kubelet_dir: Path = Path(DEVICE_PLUGIN_DIR)
    sysfs_root: Path = DEFAULT_SYSFS_ROOT
    procfs_root: Path = DEFAULT_PROCFS_ROOT
    install_dir: str = str(DEFAULT_INSTALL_DIR)
    plan: PlanOptions = field(default_factory=PlanOptions)
    #: Where to write the CDI spec whose hook confines containers; None: no CDI (the CLI defaults to on).
    cdi_dir: Path | None = None
    #: The kubelet's pod resources socket, read before serving to learn which devices are held; None: not read.
    pod_resources_socket: Path | None = None
    #: Seconds between re-reads of pod resources while a core is withheld (to put it back once freed) or a pool
    #: refused under the kubelet's static CPU manager (to serve it once the policy is none).
    held_recheck: float = 10.0
    #: Why the config was refused, when ``plan`` is the last good one instead (health says NOT_SERVING).
    config_problem: str | None = None
    #: Mark the CDI devices of whole exclusive cores, so the hook removes the CFS quota of containers holding only them.
    unthrottle_exclusive: bool = True
    #: Pools whose held CPUs device interrupts are kept off (:mod:`deviceplugin.daemon.irqsteerer`); empty: none.
    irq_steering: frozenset[Pool] = frozenset()
    #: The IRQ masks steering writes, and where a running irqbalance listens (it owns the masks then).
    irq_dir: Path = DEFAULT_IRQ_DIR
    irqbalance_dir: Path = DEFAULT_IRQBALANCE_DIR
    #: Where the node-wide hook's infra record lives (the install dir); None: not written (the CLI defaults to on).
    infra_record_dir: Path | None = None
    #: Device plugins, or one DRA driver (:mod:`deviceplugin.daemon.draserving`).
    mode: ServingMode = ServingMode.DEVICE_PLUGIN
    #: DRA mode: the kubelet's plugin registration directory and its plugins directory (both follow its --root-dir).
    plugins_registry_dir: Path = Path(PLUGINS_REGISTRY_DIR)
    plugins_dir: Path = Path(PLUGINS_DIR)


def socket_name(resource: str) -> str:
    """``cmk.intel.com/exclusive-cores`` -> ``cmk-exclusive-cores.sock``: stable, so a restart replaces it."""
    return f"cmk-{resource.rpartition('/')[2]}.sock"


def check_tree(tree: DeviceTree, kubelet_dir: Path) -> dict[str, bytes]:
    """Every name, ID, socket path and ListAndWatch message fits the protocol, before anything is served.

    Returns each pool's ListAndWatch message as sized (:func:`~deviceplugin.protocol.server.list_message_wire`),
    for its server to send rather than build again.
    """
    wires = {}
    for resource, devices in tree.items():
        wires[resource] = wire = list_message_wire(devices)
        problems = [validate_resource_name(resource)] + [validate_device_id(i) for i in devices.devices]
        problems += [socket_path_problem(kubelet_dir / socket_name(resource)), list_message_problem(devices, wire)]
        problem = next((p for p in problems if p), None)
        if problem:
            raise CmkError(problem)
    return wires
