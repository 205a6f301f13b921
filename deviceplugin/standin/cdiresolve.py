"""Resolving CDI device names against spec directories, as the container runtime does at every creation.

The runtime (containerd with ``enable_cdi``, CRI-O, podman) reads every
``*.json`` and ``*.yaml`` spec in its CDI directories; a fully qualified name
``vendor/class=device`` resolves when a spec of kind ``vendor/class`` declares
the device. A spec that cannot be parsed is skipped (the runtime logs it), so
its names do not resolve.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml


def _spec_names(path: Path) -> set[str]:
    try:
        text = path.read_text()
        spec = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        kind = spec["kind"]
        return {f"{kind}={device['name']}" for device in spec["devices"]}
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
        return set()


def declared_devices(directories: Iterable[Path]) -> set[str]:
    names: set[str] = set()
    for directory in directories:
        if directory.is_dir():
            for path in sorted(directory.iterdir()):
                if path.suffix in (".json", ".yaml") and not path.name.startswith("."):
                    names |= _spec_names(path)
    return names


def unresolvable(names: Sequence[str], directories: Iterable[Path]) -> list[str]:
    """The names no spec in ``directories`` declares, in order."""
    declared = declared_devices(directories)
    return [name for name in names if name not in declared]
