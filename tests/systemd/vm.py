"""Booting systemd as PID 1 on cgroup v2 in a VM, once per kernel, and bringing back what the guest program saw.

``.ci/build-systemd-node`` builds (once, cached) a Debian bookworm root file
system with systemd, dbus, runc, crun and python3, holding bookworm's 6.1
kernel and trixie-backports' 7.x with their modules. Each kernel boots that
root read-only under ``qemu-system-x86`` (TCG: no KVM here) through
virtme-ng's ``vng --systemd``; ``systemd.run=`` makes systemd boot straight
into the build's ``cmk-systemd-guest``, which mounts this checkout read-only
at :data:`GUEST_REPO` and the share read-write at its host path, then runs the
``cmk.run=`` script the host wrote into the share: ``python3 -m
tests.systemd.guest`` with the root's own python3. systemd powers off when it
ends (``systemd.run_success_action``/``failure_action``).

A VM that cannot boot, or whose guest writes no result, raises
:class:`BootError` with the tail of its console: its tests fail, never skip.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.node.vm import HARNESS_CMDLINE, BootError, find_vng, run_vm
from tests.support import escape
from tests.systemd import steps

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / ".ci/build-systemd-node"
#: Where the guest sees this checkout (read-only); the guest's root is read-only, /run is a tmpfs.
GUEST_REPO = "/run/cmk/repo"
#: Where the guest sees the cluster build's binaries (the kubelet, containerd, kubectl, ctr), read-only.
KUBE_BIN = "/run/cmk/bin"
#: Under TCG on a busy 2-CPU machine, a boot reaches the guest program in 1.5-2 minutes and the guest runs 5-7;
#: this bounds a hang.
BOOT_TIMEOUT_SECONDS = 900
#: The kubelet node after the steps (tests/systemd/kubelet_guest.py) takes 20 to 30 minutes more under TCG.
KUBELET_TIMEOUT_SECONDS = 3600
BUILD_TIMEOUT_SECONDS = 1800
MEMORY = "3G"  # the kubelet node unpacks its images in tmpfs
#: The systemd side of the command line: cgroup v2 only, boot into the guest program and power off after it.
SYSTEMD_CMDLINE = ("systemd.unified_cgroup_hierarchy=1 systemd.show_status=error "
                   "systemd.run=/usr/local/sbin/cmk-systemd-guest "
                   "systemd.run_success_action=poweroff systemd.run_failure_action=poweroff")
#: A static pinner to install instead of this checkout's build (``pinner/bin/cmk``), e.g. an older commit's hook.
PINNER_ENV = "CMK_SYSTEMD_PINNER"
#: The CDI device the pinned container holds: the exclusive CPU's core, as the daemon's spec names it.
CDI_DEVICE = "core-1"


@dataclass(frozen=True)
class Built:
    """The build's cache directory, the root to boot and each kernel's release and image by label."""

    directory: Path
    root: Path
    kernels: dict[str, tuple[str, Path]]


def build() -> Built:
    """Run ``.ci/build-systemd-node`` (nothing to do when its cache is complete); what it built."""
    try:
        done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS,
                              check=False)
    except subprocess.TimeoutExpired as err:
        raise BootError(f"{BUILD} did not finish in {BUILD_TIMEOUT_SECONDS} s: {err.stderr!r}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise BootError(f"{BUILD} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    directory = Path(done.stdout.strip().splitlines()[-1])
    kernels: dict[str, tuple[str, Path]] = {}
    for line in (directory / "kernels").read_text().splitlines():
        release, image = line.split()
        label = "bookworm" if release.startswith("6.1.") else "backports"
        kernels[label] = (release, Path(image))
    missing = set(steps.KERNELS) - set(kernels)
    if missing:
        raise BootError(f"{directory}/kernels lists no {sorted(missing)} kernel: {kernels}")
    return Built(directory, directory / "root", kernels)


def prepare_share(share: Path, pinner: Path | None = None) -> dict[str, Any]:
    """What every guest uses, in the share: ``cmk install``'s directory (the static pinner, the node-wide hook's
    declaration) with the infra record the daemon writes for the guest's plan, the escape attacker, and the
    daemon's CDI spec for the exclusive CPU's core. The pinner must be built already (ensure_native_pinner);
    ``pinner`` (:data:`PINNER_ENV`) replaces the installed binary, to try another build of the hook."""
    from deviceplugin.host import nodewide
    from deviceplugin.model import cdispec

    install_dir = share / "opt-bin"
    subprocess.run([sys.executable, "-m", "deviceplugin", "install", "--install-dir", str(install_dir)],
                   cwd=REPO, check=True, capture_output=True)
    if pinner is not None:
        shutil.copy2(pinner, install_dir / "cmk")
    # `cmk install` plans from this host's /sys; the daemon in the 2-CPU guest writes its own record: CPU 0.
    nodewide.write_record(install_dir, steps.INFRA)
    escape.build(install_dir / "escape")
    spec = cdispec.build_spec({CDI_DEVICE: steps.EXCLUSIVE}, cdispec.hook_path(str(install_dir)),
                              exclusive={CDI_DEVICE})
    return {"install_dir": str(install_dir), "cdi_spec": spec, "cdi_devices": [cdispec.qualified_name(CDI_DEVICE)]}


def vng_command(vng: str, built: Built, label: str, share: Path, script: Path,
                kube_bin: Path | None = None) -> list[str]:
    """The vng command line booting ``label``'s kernel on the built root with systemd as PID 1; with ``kube_bin``
    (the cluster build's binaries, read-only at :data:`KUBE_BIN`) and qemu's user network for the kubelet node."""
    _, image = built.kernels[label]
    kube = ["--network", "user", f"--rodir={KUBE_BIN}={kube_bin}"] if kube_bin else []
    return [vng, "--run", str(image), "--disable-kvm", "--force-9p", "--root", str(built.root), "--systemd",
            "--cpus", str(steps.VM_CPUS), "--memory", MEMORY, "--name", f"cmk-systemd-{label}", *kube,
            f"--rwdir={share}={share}", f"--rodir={GUEST_REPO}={REPO}",
            "--append", f"{SYSTEMD_CMDLINE} cmk.run={script} {HARNESS_CMDLINE}"]


@dataclass(frozen=True)
class Boot:
    label: str
    release: str
    result: dict[str, Any]
    wall_seconds: float
    console: Path
    #: The kubelet node's result (:mod:`tests.systemd.kubelet_guest`), when the boot ran it.
    kubelet: dict[str, Any] | None = None


GUEST_MODULE = "tests.systemd.guest"
KUBELET_MODULE = "tests.systemd.kubelet_guest"


def boot(built: Built, label: str, share: Path, prepared: dict[str, Any], modules: tuple[str, ...] = (GUEST_MODULE,),
         kube: dict[str, Any] | None = None) -> Boot:
    """Boot ``label``'s kernel, run each guest program in turn (``python3 -m MODULE PLAN``: the tier's, the kubelet
    node's with ``kube`` (:func:`tests.systemd.kubelet.kube_plan`), or a benchmark's), return what they wrote
    (BootError with the console if the first wrote nothing)."""
    release, _ = built.kernels[label]
    result_path = share / f"{label}.json"
    plan_path = share / f"{label}.plan.json"
    plan_path.write_text(json.dumps({"kernel": label, "release": release, "result": str(result_path), **prepared,
                                     **({"kube": kube} if kube else {})}))
    script = share / f"{label}.run.sh"
    script.write_text(f"cd {GUEST_REPO}\n" + "".join(
        f"PYTHONPATH={GUEST_REPO} PYTHONDONTWRITEBYTECODE=1 python3 -m {module} {shlex.quote(str(plan_path))}\n"
        for module in modules))
    console = share / f"{label}.console.log"
    command = vng_command(find_vng(), built, label, share, script, Path(kube["host_bin"]) if kube else None)
    started = time.monotonic()
    status = run_vm(command, console, BOOT_TIMEOUT_SECONDS + (KUBELET_TIMEOUT_SECONDS if kube else 0))
    wall = time.monotonic() - started
    if result_path.is_file():
        kubelet_path = Path(kube["result"]) if kube else None
        kubelet = json.loads(kubelet_path.read_text()) if kubelet_path and kubelet_path.is_file() else None
        return Boot(label, release, json.loads(result_path.read_text()), wall, console, kubelet)
    tail = console.read_text(errors="replace")[-5000:]
    raise BootError(f"VM {label} (kernel {release}; {status}, {wall:.0f} s) wrote no result; "
                    f"command: {shlex.join(command)}\nconsole tail:\n{tail}")
