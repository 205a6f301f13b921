"""The bounds every number the commands read must fit, and the strict parsers that enforce them.

One place, so a flag, a config key and a sysfs file refuse the same inputs:

* counts are ASCII digits only (``int()`` also takes ``+1``, ``1_000``,
  `` 1 ``, ``٣`` and ``１``), no leading zero (YAML 1.1 and C read ``010``
  as 8), and at most a few digits before they are converted at all (a
  5,000-digit number costs ``int()`` time and then raises).
* CPU ids stay below :data:`MAX_CPUS`, the kernel's largest ``NR_CPUS``,
  the same limit the pinner enforces (taken from it, not repeated).
* slots stay at or below :data:`MAX_SLOTS`, so one ListAndWatch message of
  a slot pool stays well under the kubelet's 4 MiB gRPC receive limit (the
  daemon also measures each real message against ``LIST_MESSAGE_LIMIT``).
"""

from __future__ import annotations

import re

from deviceplugin.model.cpulist import CpuListError, parse_cpu_list, parse_cpu_mask
from deviceplugin.model.pinnercontract import MAX_CPUS

__all__ = ["MAX_CPUS", "MAX_SLOTS", "CpuListError", "checked_cpu_list", "checked_cpu_mask", "parse_count", "parse_seconds"]

#: Devices a shared or infra pool may advertise. 10,000 slot devices with the longest slot ID, every one
#: Unhealthy and on 16 NUMA nodes, serialize to 1.08 MB (280 KB healthy on one node;
#: tests/protocol/test_limits.py measures it): a quarter of the kubelet's limit, and 90 times the
#: kubelet's default maxPods (110).
MAX_SLOTS = 10_000
_DIGITS = frozenset("0123456789")
_CPU_DIGITS = len(str(MAX_CPUS))
#: A run of more digits than any CPU number below MAX_CPUS has (found by C, not a loop over each character:
#: discovery checks one list per core, 4,096 on 8,192 CPUs).
_TOO_MANY_DIGITS = re.compile(f"[0-9]{{{_CPU_DIGITS + 1}}}")


def parse_count(text: str, *, least: int, most: int) -> int:
    """``text`` as a whole number in ``least..most``; ValueError saying what is expected."""
    body = text
    negative = body.startswith("-") and len(body) > 1
    if negative:
        body = body[1:]
    if not body or not set(body) <= _DIGITS or (negative and body == "0"):
        raise ValueError(f"expected a whole number, got {text[:40]!r} (ASCII digits, {least} to {most})")
    if len(body) > 1 and body[0] == "0":
        raise ValueError(f"expected a whole number, got {text[:40]!r} (no leading zero: YAML 1.1 and C read 010 as 8)")
    if len(body) > len(str(max(abs(least), abs(most)))):
        raise ValueError(f"must be {most} or less, got a {len(body)}-digit number")
    value = -int(body) if negative else int(body)
    if value < least:
        raise ValueError(f"must be {least} or more, got {value}")
    if value > most:
        raise ValueError(f"must be {most} or less, got {value}")
    return value


def parse_seconds(text: str, *, most: float, zero: bool) -> float:
    """``text`` as seconds (ASCII decimal, ``2`` or ``0.5``) up to ``most``; ValueError saying what is expected.

    ``float()`` also takes ``nan``, ``inf``, ``1e400``, ``٣`` and ``_``: none of them is a duration.
    """
    whole, _, fraction = text.partition(".")
    least = "0" if zero else "more than 0"
    if not (whole or fraction) or not set(whole + fraction) <= _DIGITS or len(whole) > len(str(int(most))):
        raise ValueError(f"expected seconds from {least} to {most:g} in ASCII digits (e.g. 2 or 0.5), got {text!r}")
    value = float(text)
    if value == 0 and not zero:
        raise ValueError(f"must be more than 0, got {text}")
    if value > most:
        raise ValueError(f"must be {most:g} seconds or less, got {text}")
    return value


def _check_cpus(cpus: frozenset[int], text: str) -> frozenset[int]:
    if cpus and max(cpus) >= MAX_CPUS:
        raise CpuListError(f"malformed cpu list {_short(text)}: CPU {max(cpus)} is past the kernel's limit "
                           f"(0-{MAX_CPUS - 1})")
    return cpus


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:40] + "...")


def checked_cpu_list(text: str) -> frozenset[int]:
    """The kernel's cpu-list syntax in ASCII, every CPU below :data:`MAX_CPUS`; CpuListError otherwise."""
    if not text.isascii():
        raise CpuListError(f"malformed cpu list {_short(text)}: CPU numbers are ASCII digits 0-9")
    if _TOO_MANY_DIGITS.search(text):
        raise CpuListError(f"malformed cpu list {_short(text)}: a CPU number past the kernel's limit "
                           f"(0-{MAX_CPUS - 1})")
    return _check_cpus(parse_cpu_list(text), text)


def checked_cpu_mask(text: str) -> frozenset[int]:
    """A sysfs hex mask no wider than :data:`MAX_CPUS` bits; CpuListError otherwise."""
    digits = text.replace("\x00", "").strip().replace(",", "").removeprefix("0x").lstrip("0")
    if not text.isascii() or len(digits) > MAX_CPUS // 4:
        raise CpuListError(f"malformed cpu mask {_short(text)}: expected at most {MAX_CPUS // 4} hex digits")
    return _check_cpus(parse_cpu_mask(text), text)
