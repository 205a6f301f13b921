"""The kernel's IRQ masks, the daemon's record of the ones it narrowed, and irqbalance's banned CPUs.

``/proc/irq/N/smp_affinity_list`` is each device IRQ's mask (a cpu list);
``/proc/irq/default_smp_affinity`` the mask a later IRQ starts with (hex
words). The record is one JSON file beside the slot record, in the device
plugin directory: ``{"45": {"found": "0-7", "wrote": "0-1,4-7"}, ...}``.
Where irqbalance runs, it owns the masks: the daemon asks it, through the
socket its own ``irqbalance-ui`` uses, to leave CPUs out (``settings cpus``)
instead of writing masks it would move again.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.atomic import write_atomically
from deviceplugin.model.cpulist import CpuListError, format_cpu_list, parse_cpu_list
from deviceplugin.model.irqsteer import DEFAULT, Narrowed

RECORD_NAME = "cmk-irq-masks.json"
DEFAULT_IRQ_DIR = Path("/proc/irq")
#: Where irqbalance 1.8+ listens (``irqbalance<pid>.sock``), as its own UI finds it.
DEFAULT_IRQBALANCE_DIR = Path("/run/irqbalance")
#: Errors that say the kernel will never take this IRQ's mask from us (managed, per-CPU, read-only /proc).
REFUSALS = frozenset({errno.EIO, errno.EINVAL, errno.EPERM, errno.EACCES, errno.EROFS, errno.ENOSPC})


def _hex_cpus(text: str) -> frozenset[int]:
    """``"00000000,000000f0"`` -> {4, 5, 6, 7}: the kernel's hex mask, 32-bit words high first."""
    value = int(text.strip().replace(",", "") or "0", 16)
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)


def _hex_mask(cpus: frozenset[int]) -> str:
    return format(sum(1 << cpu for cpu in cpus), "x")


def read_masks(irq_dir: Path) -> dict[str, frozenset[int]]:
    """Every numbered IRQ's mask and the default one; an IRQ freed while read is left out."""
    masks: dict[str, frozenset[int]] = {}
    try:
        names = [entry.name for entry in os.scandir(irq_dir) if entry.name.isdigit()]
    except OSError as err:
        raise CmkError(f"cannot list {irq_dir}: {os_reason(err)}") from None
    for name in names:
        try:
            masks[name] = parse_cpu_list((irq_dir / name / "smp_affinity_list").read_text().strip())
        except (OSError, CpuListError):
            continue
    try:
        masks[DEFAULT] = _hex_cpus((irq_dir / "default_smp_affinity").read_text())
    except (OSError, ValueError):
        pass
    return masks


def write_mask(irq_dir: Path, irq: str, cpus: frozenset[int]) -> None:
    """Point ``irq`` at ``cpus``; OSError when the kernel refuses (``errno`` in :data:`REFUSALS`: for good)."""
    if irq == DEFAULT:
        (irq_dir / "default_smp_affinity").write_text(_hex_mask(cpus))
    else:
        (irq_dir / irq / "smp_affinity_list").write_text(format_cpu_list(cpus))


def record_exists(directory: Path) -> bool:
    """Masks a daemon narrowed are still recorded: one started with steering off gives them back."""
    return (directory / RECORD_NAME).exists()


def read_record(directory: Path) -> dict[str, Narrowed]:
    """The masks a daemon narrowed and has not given back; empty when there is no record."""
    path = directory / RECORD_NAME
    try:
        data = json.loads(path.read_text())
        return {str(irq): Narrowed(parse_cpu_list(entry["found"]), parse_cpu_list(entry["wrote"]))
                for irq, entry in dict(data).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, KeyError, CpuListError) as err:
        raise CmkError(f"cannot read the IRQ mask record {path}: {err}; the masks it names stay as they are "
                       "until you set them (/proc/irq/N/smp_affinity_list) and delete it") from None


def write_record(directory: Path, record: Mapping[str, Narrowed]) -> None:
    path = directory / RECORD_NAME
    if not record:
        path.unlink(missing_ok=True)
        return
    data = {irq: {"found": format_cpu_list(e.found), "wrote": format_cpu_list(e.wrote)}
            for irq, e in sorted(record.items())}
    try:
        write_atomically(path, (json.dumps(data, indent=1) + "\n").encode(), mode=0o644)
    except OSError as err:
        raise CmkError(f"cannot write the IRQ mask record {path}: {os_reason(err)}") from None


def ban_cpus(directory: Path, cpus: frozenset[int]) -> Path | None:
    """Ask the irqbalance listening in ``directory`` to place no IRQ on ``cpus`` (none: its own banned CPUs
    again); the socket that took it, or None when no irqbalance listens (a dead one's socket refuses)."""
    command = f"settings cpus {format_cpu_list(cpus) if cpus else 'NULL'}".encode()
    try:
        sockets = sorted(directory.glob("irqbalance*.sock"))
    except OSError:
        return None
    for path in sockets:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(2.0)
                conn.connect(str(path))
                conn.sendall(command)
        except OSError:
            continue
        return path
    return None
