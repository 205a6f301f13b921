"""The CDI room, all of it pure: names, the spec's content, the devices kept from an earlier spec, the hook's argv.

The CDI spec makes the container runtime run ``cmk hook`` for our
containers, with their CPUs. What a device is called (in the spec and in an
Allocate answer), what the spec holds and which devices of an earlier spec
are kept are values computed here; ``deviceplugin.host.cdi`` only reads and
writes the file.

A checkpointed Allocate answer may name a device the new plan no longer
defines, and the runtime refuses a container whose CDI name does not resolve,
so such devices are kept. Only their *CPUs* are taken from the old spec: the
daemon rebuilds each kept device with its own hook path and arguments
(:func:`build_spec`), so whatever else the file on disk carries (another hook
path, extra arguments, env, mounts, device nodes) is never written again.
Why: ``docs/design/cdi-spec.md``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import CpuListError, format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import DeviceTree, PoolDevices
from deviceplugin.model.plan import CORE_POOLS

CDI_VERSION = "0.5.0"
#: The CDI kind of the daemon's devices.
KIND = "cmk.intel.com/cpus"
VENDOR, _, CLASS = KIND.partition("/")
#: One file per node daemon; the runtime reads every *.json in its CDI dirs.
SPEC_FILE_NAME = f"{VENDOR}-{CLASS}.json"
#: Set in every container that got one of our devices: the runtime's hook confined it (informational only:
#: a pod can set it too, so nothing trusts it).
CONFINED_ENV = "CMK_CDI_CONFINED=1"
#: The runtime kills the hook and fails the start after this; the hook takes about a millisecond.
HOOK_TIMEOUT_SECONDS = 10
HOOK_STAGE = "createRuntime"
#: The pinner's file name in the install dir (``cmk install`` puts it there; the hook is the same binary).
INSTALLED_NAME = "cmk"

#: The CDI library's device-name rule (``parser.ValidateDeviceName``): one bad name makes the runtime refuse the spec.
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?\Z")


def qualified_name(device: str) -> str:
    """The fully qualified name an Allocate answer returns: ``cmk.intel.com/cpus=core-n0-p0-c1``."""
    return f"{KIND}={device}"


def cdi_device(devices: PoolDevices, device_id: str) -> str:
    """The spec's device for one kubelet device ID: the ID itself for a core, the pool for a slot.

    Every slot of a pool carries the pool's CPUs, so one device per slot pool
    keeps the spec O(cores) however many slots are advertised; NUMA-local slots
    carry their node's pool CPUs, so each node's slots share one device (``shared-n1``).
    """
    if devices.pool in CORE_POOLS:
        return device_id
    device = devices.devices.get(device_id)
    node = device.slot_node if device is not None else None
    return devices.pool.value if node is None else f"{devices.pool.value}-n{node}"


def cdi_device_names(devices: PoolDevices, ids: Sequence[str]) -> tuple[str, ...]:
    """The fully qualified CDI devices an answer for ``ids`` names (``cmk.intel.com/cpus=cpus-1.9``), once each."""
    return tuple(dict.fromkeys(qualified_name(cdi_device(devices, i)) for i in ids))


def hook_path(install_dir: str) -> str:
    """The host path of the binary ``cmk install --install-dir`` put there: the hook the runtime runs."""
    return f"{install_dir.rstrip('/')}/{INSTALLED_NAME}"


def spec_devices(tree: DeviceTree, cores: Mapping[str, frozenset[int]] = MappingProxyType({})) -> dict[str, frozenset[int]]:
    """Every CDI device the daemon's pools can name, with its CPUs; ``cores`` (core ID -> CPUs) adds cores in no core pool now."""
    devices = dict(cores)
    devices.update((cdi_device(pool, device.id), device.cpus)
                   for pool in tree.values() for device in pool.devices.values())
    return devices


def exclusive_devices(tree: DeviceTree) -> frozenset[str]:
    """The CDI devices of whole exclusive cores (both core pools): nobody else runs on their CPUs."""
    return frozenset(cdi_device(devices, device.id) for devices in tree.values() if devices.pool in CORE_POOLS
                     for device in devices.devices.values())


def build_spec(devices: Mapping[str, frozenset[int]], hook_path: str,
               exclusive: Collection[str] = frozenset()) -> dict[str, Any]:
    """The spec naming ``devices`` (name -> CPUs), each of whose hooks runs the host's ``hook_path``.

    The hooks of the devices named in ``exclusive`` carry ``--exclusive``.

    ``hook_path`` is the binary's path on the host (the install dir + ``/cmk``):
    the runtime runs the hook in its own namespaces, not the container's.
    """
    if not devices:
        raise ValueError("a CDI spec needs at least one device")
    if not hook_path.startswith("/"):
        raise ValueError(f"the hook path must be absolute (a host path), not {hook_path!r}")
    empty = [name for name, cpus in devices.items() if not cpus]
    if empty:
        raise ValueError(f"a CDI device needs CPUs for its hook: {', '.join(empty)}")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [
            {
                "name": name,
                "containerEdits": {
                    "env": [CONFINED_ENV],
                    "hooks": [{
                        "hookName": HOOK_STAGE,
                        "path": hook_path,
                        "args": hook.command_line(format_cpu_list(cpus), exclusive=name in exclusive),
                        "timeout": HOOK_TIMEOUT_SECONDS,
                    }],
                },
            }
            for name, cpus in devices.items()
        ],
    }


def kept_cpus(previous: object, kind: str, named: Collection[str]) -> dict[str, frozenset[int]]:
    """name -> CPUs of every device of ``previous`` (a spec of ``kind``) that ``named`` lacks and a ``cmk hook`` confines.

    A device is kept only when one of its hooks runs ``cmk hook`` with a
    ``--cpus=LIST`` that parses, and then with the union of those lists (the
    hook itself confines to the union of its entries). A device without one
    (an older release carried the CPUs only in the untrusted env) stays
    unresolvable rather than start its container unconfined; so does one whose
    name the CDI library would refuse. The first device of a name wins.
    """
    if not isinstance(previous, Mapping) or previous.get("kind") != kind:
        return {}
    devices = previous.get("devices")
    kept: dict[str, frozenset[int]] = {}
    for device in devices if isinstance(devices, list) else []:
        name = device.get("name") if isinstance(device, Mapping) else None
        if not isinstance(name, str) or name in named or name in kept or not _DEVICE_NAME.match(name):
            continue
        cpus = _hook_cpus(device)
        if cpus:
            kept[name] = cpus
    return kept


def _hook_cpus(device: Mapping[str, object]) -> frozenset[int] | None:
    """The union of the device's ``cmk hook --cpus=LIST`` entries; None when it has none or one does not parse."""
    edits = device.get("containerEdits")
    hooks = edits.get("hooks") if isinstance(edits, Mapping) else None
    lists = [arg.removeprefix(f"{hook.CPUS_OPTION}=")
             for entry in (hooks if isinstance(hooks, list) else []) if isinstance(entry, Mapping)
             for args in [entry.get("args")]
             if isinstance(args, list) and tuple(args[:len(hook.ARGS)]) == hook.ARGS
             for arg in args if isinstance(arg, str) and arg.startswith(f"{hook.CPUS_OPTION}=")]
    if not lists:
        return None
    try:
        return frozenset().union(*(parse_cpu_list(text) for text in lists))
    except CpuListError:
        return None
