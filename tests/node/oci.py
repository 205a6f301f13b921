"""An OCI bundle's config.json as the kubelet and a CDI-enabled runtime would give it to runc or crun.

The node tests confine a real container with the daemon's own CDI spec, so
the edits are applied from the spec file the daemon wrote, not written out
by hand: whatever the spec carries reaches config.json the way the CDI
library (``pkg/cdi/container-edits.go``) applies it. An edit this module does
not know is an error, never silently dropped, so a spec that grows a new kind
of edit fails the node test until it is applied here too. The node-wide
hook's hooks.d declaration reaches config.json the same way, as podman and
CRI-O apply it (containers/common ``pkg/hooks``), with the same refusal of
what this module does not follow.

Pure: values in, values out (the device nodes' major/minor numbers come in
as a callable, since finding them is I/O).
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from deviceplugin.model import hookcontract as cmk_hook
from deviceplugin.model.cpulist import parse_cpu_list

#: What the CDI library applies; anything else in a spec is refused.
KNOWN_EDITS = frozenset({"env", "deviceNodes", "hooks", "mounts", "additionalGids"})
#: The hooks.d version followed here (``pkg/hooks/1.0.0``); the legacy 0.1.0 reader is not.
HOOKS_VERSION = "1.0.0"
#: Each stage a 1.0.0 declaration may name, and the config.json list it lands in (``hooks.go``: prestart
#: goes to createRuntime). podman's own extension stages are run by podman, not the runtime: refused.
HOOK_STAGES = {"createContainer": "createContainer", "createRuntime": "createRuntime", "prestart": "createRuntime",
               "poststart": "poststart", "poststop": "poststop", "startContainer": "startContainer"}
#: The properties of a declaration, its ``when`` and its ``hook`` that are followed; others are refused
#: (Go's decoder would drop them silently, hiding a typo).
DECLARATION_KEYS = frozenset({"version", "hook", "when", "stages"})
WHEN_KEYS = frozenset({"always", "annotations", "commands", "hasBindMounts"})
HOOK_KEYS = frozenset({"path", "args", "env", "timeout"})


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


def hook_cpus(config: Mapping[str, Any]) -> frozenset[int]:
    """The CPUs ``cmk hook`` confines ``config``'s container to: the union of the ``--cpus`` of its entries.

    As the hook reads them (``deviceplugin/model/hookcontract.py``, step 2): every ``hooks.createRuntime``
    entry whose argv is ``cmk hook ...`` (argv[0] may be a path ending in ``/cmk``); never the env.
    """
    found: frozenset[int] = frozenset()
    for entry in config.get("hooks", {}).get("createRuntime", []):
        args = entry.get("args", [])
        if len(args) < 2 or (args[0].rpartition("/")[2], args[1]) != cmk_hook.ARGS:
            continue
        for arg in args[2:]:
            name, _, value = arg.partition("=")
            if name == cmk_hook.CPUS_OPTION:
                found |= parse_cpu_list(value)
    return found


def read_hooks_dirs(directories: Iterable[Path]) -> dict[str, Any]:
    """The declarations of hooks.d ``directories`` by file name, a later directory's file masking an earlier one's.

    As ``pkg/hooks`` ``New``/``ReadDir``: only ``*.json`` files, a missing
    directory is no error, and a declaration whose hook binary does not exist
    is skipped, masking nothing (``New`` ignores that not-exist error).
    """
    found: dict[str, Any] = {}
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            if not path.name.endswith(".json"):
                continue
            declaration = json.loads(path.read_text())
            if Path(str(declaration.get("hook", {}).get("path", ""))).exists():
                found[path.name] = declaration
    return found


def _refuse_unknown(what: str, value: Mapping[str, Any], known: frozenset[str]) -> None:
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"hooks.d {what} {sorted(unknown)} are not followed by tests/node/oci.py: add them there")


def _validate(name: str, declaration: Mapping[str, Any]) -> None:
    """``Hook.Validate`` of 1.0.0, plus the refusal of what is not followed here."""
    _refuse_unknown(f"{name} properties", declaration, DECLARATION_KEYS)
    _refuse_unknown(f"{name} when", declaration.get("when", {}), WHEN_KEYS)
    _refuse_unknown(f"{name} hook", declaration.get("hook", {}), HOOK_KEYS)
    if declaration.get("version") != HOOKS_VERSION:
        raise ValueError(f"{name}: unrecognized hook version: {declaration.get('version')!r}")
    if not declaration.get("hook", {}).get("path"):
        raise ValueError(f"{name}: missing required property: hook.path")
    if declaration.get("stages") is None:
        raise ValueError(f"{name}: missing required property: stages")
    for stage in declaration["stages"]:
        if stage not in HOOK_STAGES:
            raise ValueError(f"{name}: unknown stage {stage!r}")
    when = declaration.get("when", {})
    for pattern in [*when.get("annotations", {}).keys(), *when.get("annotations", {}).values(),
                    *when.get("commands", [])]:
        re.compile(pattern)


def hook_matches(when: Mapping[str, Any], config: Mapping[str, Any], annotations: Mapping[str, str],
                 has_bind_mounts: bool) -> bool:
    """``When.Match`` of 1.0.0: every condition set must hold, and at least one must be set.

    Patterns match anywhere in the string (Go's ``regexp.MatchString``);
    ``commands`` is tried on ``process.args[0]``.
    """
    matches = 0
    for flag, holds in (("always", True), ("hasBindMounts", has_bind_mounts)):
        if when.get(flag) is not None:
            if not (when[flag] and holds):
                return False
            matches += 1
    for key_pattern, value_pattern in when.get("annotations", {}).items():
        if not any(re.search(key_pattern, k) and re.search(value_pattern, v) for k, v in annotations.items()):
            return False
        matches += 1
    if config.get("process") is not None and when.get("commands"):
        args = config["process"].get("args") or []
        if not args:
            raise ValueError("process.args must have at least one entry")
        return any(re.search(pattern, args[0]) for pattern in when["commands"])
    return matches > 0


def apply_hooks(config: Mapping[str, Any], declarations: Mapping[str, Mapping[str, Any]],
                annotations: Mapping[str, str] | None = None, has_bind_mounts: bool = False) -> dict[str, Any]:
    """``config`` with the matching hooks.d ``declarations`` (file name to content) added, as ``Manager.Hooks`` does.

    In the order of their file names (case-folded), each matching hook is
    appended to the config.json list of each of its stages, after the hooks
    already there (the CDI devices' edits come first, as in podman).
    """
    result = copy.deepcopy(dict(config))
    for name in sorted(declarations, key=str.lower):
        declaration = declarations[name]
        _validate(name, declaration)
        if hook_matches(declaration.get("when", {}), result, annotations or {}, has_bind_mounts):
            for stage in declaration["stages"]:
                result.setdefault("hooks", {}).setdefault(HOOK_STAGES[stage], []).append(dict(declaration["hook"]))
    return result
