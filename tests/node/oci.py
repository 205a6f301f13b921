"""An OCI bundle's config.json as the kubelet and a CDI-enabled runtime would give it to runc or crun.

The node tests confine a real container with the daemon's own CDI spec, so
the edits are applied from the spec file the daemon wrote, not written out
by hand: whatever the spec carries reaches config.json the way the CDI
library (``pkg/cdi/container-edits.go``) applies it. An edit this module does
not know is an error, never silently dropped, so a spec that grows a new kind
of edit fails the node test until it is applied here too.

Pure: values in, values out (the device nodes' major/minor numbers come in
as a callable, since finding them is I/O).
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: What the CDI library applies; anything else in a spec is refused.
KNOWN_EDITS = frozenset({"env", "deviceNodes", "hooks", "mounts", "additionalGids"})


def device_numbers(path: str) -> tuple[str, int, int]:
    """(type, major, minor) of a device node on this machine, as the CDI library fills them in."""
    st = os.stat(path)
    kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else ""
    if not kind:
        raise ValueError(f"{path} is not a device node")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev)


def _set_env(process: dict[str, Any], entries: Iterable[str]) -> None:
    """Add or replace ``NAME=value`` entries, as the runtime spec generator's AddProcessEnv does."""
    env = process.setdefault("env", [])
    for entry in entries:
        name = entry.partition("=")[0]
        env[:] = [e for e in env if e.partition("=")[0] != name]
        env.append(entry)


def _add_mount(config: dict[str, Any], destination: str, source: str, options: Sequence[str],
               kind: str = "bind") -> None:
    mounts = [m for m in config.setdefault("mounts", []) if m.get("destination") != destination]
    mounts.append({"destination": destination, "type": kind, "source": source, "options": list(options)})
    config["mounts"] = mounts


def _add_device(config: dict[str, Any], node: Mapping[str, Any],
                numbers: Callable[[str], tuple[str, int, int]]) -> None:
    host_path = node.get("hostPath") or node["path"]
    kind, major, minor = numbers(host_path)
    linux = config.setdefault("linux", {})
    linux.setdefault("devices", []).append(
        {"path": node["path"], "type": node.get("type", kind), "major": node.get("major", major),
         "minor": node.get("minor", minor), "fileMode": node.get("fileMode", 0o666), "uid": 0, "gid": 0})
    linux.setdefault("resources", {}).setdefault("devices", []).append(
        {"allow": True, "type": kind, "major": major, "minor": minor,
         "access": node.get("permissions") or "rwm"})


def apply_edits(config: dict[str, Any], edits: Mapping[str, Any],
                numbers: Callable[[str], tuple[str, int, int]] = device_numbers) -> None:
    """Apply one ``containerEdits`` object to ``config`` in place."""
    unknown = set(edits) - KNOWN_EDITS
    if unknown:
        raise ValueError(f"CDI edits {sorted(unknown)} are not applied by tests/node/oci.py: add them there")
    _set_env(config.setdefault("process", {}), edits.get("env", []))
    for node in edits.get("deviceNodes", []):
        _add_device(config, node, numbers)
    for mount in edits.get("mounts", []):
        _add_mount(config, mount["containerPath"], mount["hostPath"], mount.get("options", []),
                   mount.get("type", "bind"))
    for hook in edits.get("hooks", []):
        entry = {k: hook[k] for k in ("path", "args", "env", "timeout") if k in hook}
        config.setdefault("hooks", {}).setdefault(hook["hookName"], []).append(entry)
    if edits.get("additionalGids"):
        user = config.setdefault("process", {}).setdefault("user", {})
        user["additionalGids"] = [*user.get("additionalGids", []), *edits["additionalGids"]]


def apply_cdi(config: Mapping[str, Any], specs: Sequence[Mapping[str, Any]], names: Iterable[str],
              numbers: Callable[[str], tuple[str, int, int]] = device_numbers) -> dict[str, Any]:
    """``config`` with the CDI devices ``names`` (``vendor/class=device``) injected from ``specs``.

    As in the CDI library: each spec's own edits once if any of its devices
    is injected, then each device's edits; an unresolvable name is an error
    ("unresolvable CDI devices"), as it fails the container's creation.
    """
    result = copy.deepcopy(dict(config))
    wanted = list(dict.fromkeys(names))
    by_kind = {spec["kind"]: spec for spec in specs}
    used_specs: list[Mapping[str, Any]] = []
    device_edits: list[Mapping[str, Any]] = []
    for name in wanted:
        kind, _, device = name.partition("=")
        spec = by_kind.get(kind)
        found = [d for d in (spec or {}).get("devices", []) if d["name"] == device]
        if not found:
            raise ValueError(f"unresolvable CDI devices {name}")
        if spec not in used_specs:
            used_specs.append(spec)  # type: ignore[arg-type]
        device_edits.append(found[0].get("containerEdits", {}))
    for spec in used_specs:
        apply_edits(result, spec.get("containerEdits", {}), numbers)
    for edits in device_edits:
        apply_edits(result, edits, numbers)
    return result


def apply_answer(config: Mapping[str, Any], envs: Mapping[str, str],
                 mounts: Iterable[tuple[str, str, bool]], devices: Iterable[tuple[str, str, str]],
                 annotations: Mapping[str, str],
                 numbers: Callable[[str], tuple[str, int, int]] = device_numbers) -> dict[str, Any]:
    """``config`` with a merged Allocate answer applied as the kubelet hands it to the runtime.

    ``mounts`` are (container path, host path, read only); ``devices`` are
    (container path, host path, permissions).
    """
    result = copy.deepcopy(dict(config))
    _set_env(result.setdefault("process", {}), [f"{k}={v}" for k, v in envs.items()])
    for container_path, host_path, read_only in mounts:
        _add_mount(result, container_path, host_path, ["rbind", "ro" if read_only else "rw"])
    for container_path, host_path, permissions in devices:
        _add_device(result, {"path": container_path, "hostPath": host_path, "permissions": permissions}, numbers)
    if annotations:
        result["annotations"] = {**result.get("annotations", {}), **annotations}
    return result
