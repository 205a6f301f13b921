"""The daemon as a process, the way its users run it: ``python -m deviceplugin device-plugin``.

Shared by the protocol tier (against the stand-in) and the cluster tier (the stand-in beside the
real kubelet).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]


def daemon_process(plugin_dir: Path, sysfs: Path, procfs: Path, *flags: str,
                   stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
    """The CLI daemon; its CDI spec goes to ``<plugin_dir>/cdi`` and its NFD file to ``<plugin_dir>/features.d``
    unless the flags say otherwise (never /var/run/cdi, the host's features.d or its infra record).

    ``stderr``: a file for a test that lets the daemon log more than a pipe holds while nobody reads it."""
    if "--cdi-dir" not in flags and "--no-cdi" not in flags:
        flags = (*flags, "--cdi-dir", str(plugin_dir / "cdi"))
    if "--install-dir" not in flags:
        flags = (*flags, "--no-infra-record")  # never the host's /opt/bin/cmk-infra-cpus
    return subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "device-plugin", "--kubelet-dir", str(plugin_dir),
         "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
         "--nfd-features-dir", str(plugin_dir / "features.d"), *flags],
        cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
