"""Booting a real kernel for one machine shape and bringing back what the guest program found.

Debian's ``linux-image-amd64`` under ``qemu-system-x86`` (TCG: no KVM here),
through virtme-ng (``vng``), which shares the host's root file system
read-only over 9p, so the guest runs this very checkout and its venv. One
directory is shared read-write: the guest program writes its JSON there.

A VM that cannot boot, or a guest that writes no result, raises
:class:`BootError` with the tail of the VM's console: the tests fail, never skip.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.node.shapes import Shape
from tests.support import escape, vmtiers

REPO = Path(__file__).resolve().parents[2]
#: A hang is bounded by this, not a speed: a boot plus every check took 2 to 3.5 minutes on a busy 2-CPU
#: machine once shape (b) ran the IRQ steering and irqbalance checks.
BOOT_TIMEOUT_SECONDS = 600
#: TCG reports an AMD CPU that cannot have SMT; an Intel vendor string makes the guest read qemu's
#: threads-per-core from CPUID leaf 0xB, so thread_siblings come out in pairs.
QEMU_CPU = "max,vendor=GenuineIntel"
#: Harness-only boot options, never the command line under test: no speculation mitigations (each
#: page-table switch costs dearly under TCG), and none of the emulated machine's drivers (kvm, ahci,
#: crypto, watchdog ...) that udev would otherwise spend half the boot loading.
_UNNEEDED_MODULES = (
    "intel_powerclamp", "ccp", "kvm", "kvm_intel", "kvm_amd", "irqbypass", "crct10dif_pclmul",
    "crc32_pclmul", "crc32c_intel", "ghash_clmulni_intel", "sha512_ssse3", "sha256_ssse3", "sha1_ssse3",
    "aesni_intel", "sr_mod", "cdrom", "sg", "ahci", "libahci", "libata", "scsi_mod", "iTCO_wdt",
    "intel_pmc_bxt", "i6300esb", "i2c_i801", "lpc_ich", "evdev", "psmouse", "pcspkr", "serio_raw",
    "button", "qemu_fw_cfg",
)
HARNESS_CMDLINE = f"mitigations=off modprobe.blacklist={','.join(_UNNEEDED_MODULES)}"


class BootError(RuntimeError):
    """The VM did not boot, or its guest program wrote no result."""


def _version_key(release: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.findall(r"\d+|[^\d.+~-]+", release))


def find_kernel() -> Path:
    """The newest ``/boot/vmlinuz-<release>`` that has its ``/lib/modules/<release>`` (vng loads 9p from there).

    ``CMK_NODE_KERNEL`` names another. A fresh machine has no ``/boot/vmlinuz``
    symlink, only the versioned file the package installed; that is what is looked for.
    """
    if os.environ.get("CMK_NODE_KERNEL"):
        kernel = Path(os.environ["CMK_NODE_KERNEL"])
        if not kernel.is_file():
            raise BootError(f"CMK_NODE_KERNEL={kernel} is not a file")
        return kernel
    kernels = [p for p in Path("/boot").glob("vmlinuz-*")
               if p.is_file() and Path("/lib/modules", p.name.removeprefix("vmlinuz-")).is_dir()]
    if not kernels:
        raise BootError("no /boot/vmlinuz-<release> with its /lib/modules/<release>: install linux-image-amd64 "
                        "(.ci/install-system-packages does), or name a kernel with CMK_NODE_KERNEL")
    return max(kernels, key=lambda p: _version_key(p.name.removeprefix("vmlinuz-")))


def find_vng() -> str:
    """virtme-ng's ``vng``, from the test extra: next to this interpreter, else on the PATH."""
    beside = Path(sys.executable).parent / "vng"
    found = str(beside) if beside.is_file() else shutil.which("vng")
    if not found:
        raise BootError("no vng: pip install -e '.[test]' installs virtme-ng")
    if not shutil.which("qemu-system-x86_64"):
        raise BootError("no qemu-system-x86_64: apt-get install qemu-system-x86 (.ci/install-system-packages)")
    return found


def vng_command(vng: str, kernel: Path, shape: Shape, cmdline: str, share: Path, plan: Path) -> list[str]:
    """The vng command line booting ``shape`` with ``cmdline`` and running the guest program on ``plan``."""
    memory = sum(int(size.rstrip("G")) for size, _ in shape.numa)
    command = [vng, "--run", str(kernel), "--disable-kvm", "--force-9p", "--cpus", shape.smp,
               "--memory", f"{memory}G", f"--qemu-opts=-cpu {QEMU_CPU}", f"--rwdir={share}"]
    for size, cpus in shape.numa:
        command += ["--numa", f"{size},cpus={cpus}"]
    guest = f"cd {shlex.quote(str(REPO))} && PYTHONPATH={shlex.quote(str(REPO))} " \
            f"{shlex.quote(sys.executable)} -m tests.node.guest {shlex.quote(str(plan))}"
    return [*command, "--append", f"{cmdline} {HARNESS_CMDLINE}".strip(), "--exec", guest]


def install_pinner(share: Path, shape: Shape) -> Path:
    """``cmk install`` into the shared directory, once per shape: the daemon's CDI hook, the pinner and the
    node-wide hook's declaration are there, and the shape's daemon writes its own infra record beside them."""
    install_dir = share / f"{shape.name}-opt-bin"
    if not (install_dir / "cmk").is_file():
        subprocess.run([sys.executable, "-m", "deviceplugin", "install", "--install-dir", str(install_dir)],
                       cwd=REPO, check=True, capture_output=True)
        escape.build(install_dir / "escape")  # the escape checks' attacker, static: the guest runs it in busybox roots
    return install_dir


@dataclass(frozen=True)
class Boot:
    shape: Shape
    cmdline: str
    result: dict[str, Any]
    wall_seconds: float
    console: Path
    #: 2 when qemu aborted on the first boot (:data:`QEMU_ABORT`).
    attempts: int = 1


#: qemu's own abort (an emulator assertion, e.g. ``msix_table_mmio_write: Assertion ... failed``, seen twice in
#: about a dozen tier runs under TCG, 8 vCPUs): the emulator died, not the kernel or anything under test.
QEMU_ABORT = re.compile(r"^qemu-system-\S+: .*Assertion .* failed\.$", re.MULTILINE)
BOOT_ATTEMPTS = 2  # a second boot only when the emulator failed (boot_again); any other failure fails at once


def boot_again(tail: str) -> bool:
    """Whether a boot that wrote no result failed in the emulator, not in what is tested: qemu aborted, or
    the console stayed empty until the hang bound (no kernel line at all: seen once in a clean-clone CI run,
    shape (a), 600 s; the same shape booted at once right after)."""
    return bool(QEMU_ABORT.search(tail)) or not tail.strip()


def run_vm(command: list[str], console: Path, timeout: float = BOOT_TIMEOUT_SECONDS) -> str:
    """Run the VM to its end (or ``timeout``), its console into ``console``; how it ended. The node and the
    systemd tiers both boot through it."""
    # vng runs virtme-run from the PATH: the venv's bin, beside vng, whether or not the venv is activated.
    env = {**os.environ, "PATH": f"{Path(command[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with console.open("wb") as log, vmtiers.started(command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log,
                                                   stderr=subprocess.STDOUT, env=env) as process:
        # its own process group, killed whole after: on a timeout, or when the session ends first, qemu goes too
        if process is None:
            return "not booted: the session ended before the VM tiers' tests"
        try:
            return f"exit status {process.wait(timeout=timeout)}"
        except subprocess.TimeoutExpired:
            return f"killed after {timeout:.0f} s"


def boot(shape: Shape, cmdline: str, share: Path, extra_plan: dict[str, Any] | None = None) -> Boot:
    """Boot ``shape`` with the kernel command line ``cmdline``, run every check of it, return the result.

    Booted once more only when the emulator failed before a result was written (:func:`boot_again`).
    """
    share.mkdir(parents=True, exist_ok=True)
    result_path = share / f"{shape.name}.json"
    plan_path = share / f"{shape.name}.plan.json"
    plan_path.write_text(json.dumps({"shape": shape.name, "result": str(result_path),
                                     "install_dir": str(install_pinner(share, shape)), **(extra_plan or {})}))
    console = share / f"{shape.name}.console.log"
    command = vng_command(find_vng(), find_kernel(), shape, cmdline, share, plan_path)
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        started = time.monotonic()
        status = run_vm(command, console)
        wall = time.monotonic() - started
        if result_path.is_file():
            return Boot(shape, cmdline, json.loads(result_path.read_text()), wall, console, attempt)
        tail = console.read_text(errors="replace")[-4000:]
        if not boot_again(tail) or attempt == BOOT_ATTEMPTS:
            break
        console.rename(console.with_suffix(f".attempt{attempt}.log"))
    raise BootError(f"VM {shape.name} ({status}, {wall:.0f} s, attempt {attempt} of {BOOT_ATTEMPTS}) wrote no result; "
                    f"command: {shlex.join(command)}\nconsole tail:\n{tail}")
