"""Which devices of an earlier CDI spec the daemon keeps, and with which CPUs: a pure reading of the old spec.

A checkpointed Allocate answer may name a device the new plan no longer
defines, and the runtime refuses a container whose CDI name does not resolve,
so such devices are kept. Only their *CPUs* are taken from the old spec: the
daemon rebuilds each kept device with its own hook path and arguments
(``deviceplugin.host.cdi.build_spec``), so whatever else the file on disk
carries (another hook path, extra arguments, env, mounts, device nodes) is
never written again. Why: ``docs/design/cdi-spec.md``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from pinner import hook
from pinner.cpulist import CpuListError, parse_cpu_list

#: The CDI library's device-name rule (``parser.ValidateDeviceName``): one bad name makes the runtime refuse the spec.
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?\Z")


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
