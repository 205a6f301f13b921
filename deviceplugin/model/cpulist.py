"""The kernel's cpu-list and cpu-mask syntax, parsed and formatted.

One grammar for the whole daemon; the static pinner parses the same syntax in C
(``pinner/native``), and the pinner tests hold the two to the same answers.

Grammar (the kernel's ``bitmap_parselist``): comma-separated groups, each
``N``, ``N-M`` or ``N-M:used/group`` (a stride: in every ``group`` CPUs
starting at N, the first ``used`` are taken). sysfs files may carry a
trailing newline or NUL bytes, and an empty file means "no CPUs".
"""

from __future__ import annotations

import sys

from deviceplugin.model.pinnercontract import MAX_CPUS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


class CpuListError(ValueError):
    """A cpu list or mask that does not follow the kernel's syntax; ``detail`` is the reason alone."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


def shown(text: str | bytes) -> str:
    """User-supplied text made safe for a one-line message: non-printable bytes become '?'.

    Works on the bytes (as the environment holds them) so Python and C replace
    exactly the same characters.
    """
    raw = text.encode(sys.getfilesystemencoding(), "surrogateescape") if isinstance(text, str) else text
    return "".join(chr(b) if 0x20 <= b < 0x7F else "?" for b in raw)


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()


def _malformed(text: str, detail: str) -> CpuListError:
    return CpuListError(f"malformed cpu list {text!r}: {detail}", detail)


def _number(token: str, text: str) -> int:
    # ASCII only (str.isdigit() takes "²" and "٣"), and at most 9 digits, as the C pinner reads them
    if not token or len(token) > 9 or not (token.isascii() and token.isdigit()):
        raise _malformed(text, f"'{shown(token)}' is not a CPU number")
    value = int(token)
    if value >= MAX_CPUS:
        raise _malformed(text, f"CPU {value} is out of range (0-{MAX_CPUS - 1})")
    return value


def parse_cpu_list(text: str, *, env: bool = False) -> frozenset[int]:
    """Parse ``0-3,8,10-15:2/4`` into a set of CPU numbers.

    ``env=True`` takes only what the pinner (``pinner/native/cpulist.c``) accepts in a ``CMK_CPUS_*``
    variable: ``N`` and ``N-M`` separated by commas, no padding, no strides,
    not empty.
    """
    body = text if env else _clean(text)
    if not body and not env:
        return frozenset()
    cpus: set[int] = set()
    for group in body.split(","):
        if not env:
            group = group.strip()
        if not group:
            raise _malformed(text, "empty entry between commas")
        span, stride = (group, "") if env else group.partition(":")[::2]
        first_s, dash, last_s = span.partition("-")
        first = _number(first_s if env else first_s.strip(), text)
        last = _number(last_s if env else last_s.strip(), text) if dash else first
        if last < first:
            raise _malformed(text, f"range '{shown(span)}' runs backwards")
        used, group_size = 1, 1
        if stride:
            used_s, slash, size_s = stride.partition("/")
            if not slash:
                raise _malformed(text, f"stride '{shown(stride)}' needs USED/GROUP")
            used, group_size = _number(used_s.strip(), text), _number(size_s.strip(), text)
            if used == 0 or group_size == 0 or used > group_size:
                raise _malformed(text, f"stride '{shown(stride)}' needs 0 < USED <= GROUP")
        for start in range(first, last + 1, group_size):
            cpus.update(range(start, min(start + used, last + 1)))
    return frozenset(cpus)


def parse_cpu_mask(text: str) -> frozenset[int]:
    """Parse a sysfs hex mask (``00000000,0000ff0f``: 32-bit words, most significant first)."""
    body = _clean(text)
    if not body:
        return frozenset()
    digits = body.replace(",", "")
    if digits[:2].lower() == "0x":
        digits = digits[2:]
    try:
        value = int(digits, 16)
    except ValueError:
        raise CpuListError(f"malformed cpu mask {text!r}: expected hex digits") from None
    return frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Format CPUs as the kernel does: ascending, consecutive runs as ``N-M``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def format_cpu_csv(cpus: Iterable[int]) -> str:
    """Format CPUs as an ascending comma-separated list: the ``CMK_CPUS_*`` env form."""
    return ",".join(str(cpu) for cpu in sorted(set(cpus)))


def format_cpu_mask(cpus: Iterable[int]) -> str:
    """Format CPUs as CMK wrote ``CMK_CPUS_ASSIGNED_MASK``: upper-case hex, no ``0x`` (0,1,4 -> ``13``).

    CMK's ``convert_array2bitmask`` was ``hex(mask)[2:].upper()``; workloads
    that parse the variable expect exactly that.
    """
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    return f"{value:X}"
