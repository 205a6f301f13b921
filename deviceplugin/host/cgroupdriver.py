"""What ``cmk host-config`` must know of the node's cgroups to print its cgroup driver: the init and the version.

Only ``stat``, nothing opened, so no file kind can block or fail it; the settings themselves are
``deviceplugin.model.hostsettings``'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from deviceplugin.model.hookcontract import SYSTEMD_RUNTIME_DIR
from deviceplugin.model.hostsettings import NodeCgroups

DEFAULT_RUN_ROOT = Path("/run")


def node_cgroups(sysfs_root: Path, run_root: Path = DEFAULT_RUN_ROOT) -> NodeCgroups:
    """systemd is the init when RUN/systemd/system is a directory (its ``sd_booted`` test); the cgroup version.

    cgroup v2 when SYSFS/fs/cgroup holds ``cgroup.controllers`` (the unified hierarchy's root); v1 (or
    hybrid, which the kubelet counts as v1) when that directory exists without it; unknown when it does not.
    """
    mount = sysfs_root / "fs" / "cgroup"
    version = 2 if os.path.exists(mount / "cgroup.controllers") else 1 if os.path.isdir(mount) else None
    return NodeCgroups(systemd=os.path.isdir(run_root / Path(SYSTEMD_RUNTIME_DIR).relative_to(DEFAULT_RUN_ROOT)), version=version)
