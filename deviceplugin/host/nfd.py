"""Node Feature Discovery labels: what the daemon found and serves, as an NFD ``features.d`` file.

Why it works this way: ``docs/design/nfd-labels.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.atomic import write_atomically
from deviceplugin.model.plan import CORE_POOLS, Pool, PoolPlan
from deviceplugin.model.topology import Topology

DEFAULT_FEATURES_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")
FEATURE_FILE = "cmk.intel.com"
PREFIX = "cmk.intel.com/"
_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


def check_label(key: str, value: str) -> None:
    """ValueError unless ``key=value`` is a valid Kubernetes label in our prefix (a bug if it fails)."""
    name = key.removeprefix(PREFIX)
    if not key.startswith(PREFIX) or len(name) > 63 or not _NAME.match(name):
        raise ValueError(f"label key {key!r} is not {PREFIX}<name of at most 63 [-A-Za-z0-9_.]>")
    if len(value) > 63 or not _VALUE.match(value):
        raise ValueError(f"label value {value!r} for {key} is not at most 63 [-A-Za-z0-9_.] starting/ending alnum")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def feature_labels(topology: Topology, plan: PoolPlan) -> dict[str, str]:
    """Label key -> value for this node's topology and plan. Pure."""
    labels = {
        "isolcpus": _bool(bool(topology.isolated)),
        "sst-bf": _bool(plan.sst_bf),
        "sst-cp": _bool(plan.sst_cp),
        "numa-nodes": str(len(topology.numa_nodes)),
    }
    for pool in Pool:
        labels[f"{pool}-cores"] = str(len(plan.pools[pool]))
        if pool not in CORE_POOLS:
            labels[f"{pool}-slots"] = str(plan.advertised(pool))
    labeled = {PREFIX + key: value for key, value in labels.items()}
    for key, value in labeled.items():
        check_label(key, value)
    return labeled


#: How long the labels outlive a stopped daemon: a rollout's next daemon rewrites the file well within it (so
#: the labels never flap), an uninstalled one's labels go at NFD's first pass after it. NFD's own writers use 1 h.
KEEP_AFTER_STOP = timedelta(hours=1)


def expiry_directive(when: datetime) -> str:
    """NFD's ``# +expiry-time=<RFC 3339>`` line (``source/local``): after ``when`` NFD ignores the file."""
    return f"# +expiry-time={when.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def features_text(labels: Mapping[str, str], expiry: datetime | None = None) -> str:
    """The file: no expiry while the daemon serves; at its stop, an expiry :data:`KEEP_AFTER_STOP` away."""
    lines = [] if expiry is None else [expiry_directive(expiry)]
    lines.append("# Written by cmk device-plugin; kept for a while after it stops (NFD expiry). Do not edit.")
    return "\n".join([*lines, *(f"{key}={value}" for key, value in labels.items())]) + "\n"


def write_features(directory: Path, labels: Mapping[str, str], expiry: datetime | None = None) -> Path:
    """Atomically (dot temp file, then rename) write the feature file; returns its path."""
    path = directory / FEATURE_FILE
    problem = f"cannot write NFD features to {directory} (use --nfd-features-dir DIR or --no-nfd)"
    try:
        write_atomically(path, features_text(labels, expiry).encode(), mode=0o644)
    except OSError as err:
        raise CmkError(f"{problem}: {os_reason(err)}") from None
    return path


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def expire_features(path: Path, written: tuple[int, int] | None, labels: Mapping[str, str],
                    now: datetime) -> datetime | None:
    """Rewrite the feature file with an expiry, if it is still the one we wrote (``written``: its identity then).

    Not removed: a rollout's next daemon rewrites it before NFD's next pass
    would drop the labels, so they do not flap. Another writer's file in its
    place (a second daemon, an operator) stays as it is. Returns the expiry,
    or None when the file was not ours.
    """
    if written is None or file_identity(path) != written:
        return None
    expiry = now + KEEP_AFTER_STOP
    write_atomically(path, features_text(labels, expiry).encode(), mode=0o644)
    return expiry
