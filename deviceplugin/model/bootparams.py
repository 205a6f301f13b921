"""The kernel command line's CPU isolation parameters, parsed (pure: no I/O).

``cpu/isolated`` in sysfs only lists CPUs isolated from scheduler domains:
``isolcpus=nohz,managed_irq,2-5`` (no ``domain`` flag) isolates CPUs the file
does not show, so discovery also reads ``isolcpus=`` and ``nohz_full=`` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from deviceplugin.model.limits import CpuListError, checked_cpu_list


@dataclass(frozen=True)
class BootCpuSettings:
    """What the boot parameters say about CPU isolation (empty when absent)."""

    isolcpus: frozenset[int] = frozenset()
    isolcpus_flags: tuple[str, ...] = ()
    nohz_full: frozenset[int] = frozenset()


def split_cmdline(text: str) -> list[str]:
    """Split a command line as the kernel's ``next_arg`` does.

    Whitespace separates parameters except inside double quotes, the quotes
    themselves are dropped, and ``--`` ends the kernel's part (the rest
    belongs to init).
    """
    params: list[str] = []
    current: list[str] = []
    quoted = False
    started = False
    for char in text.replace("\x00", " "):
        if char == '"':
            quoted = not quoted
            started = True
        elif char.isspace() and not quoted:
            if started:
                params.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
    if started:
        params.append("".join(current))
    if "--" in params:
        params = params[: params.index("--")]
    return params


def parse_isolcpus(value: str) -> tuple[tuple[str, ...], frozenset[int]]:
    """Split ``isolcpus=`` into its flags and CPUs: ``nohz,domain,2-5`` -> ((nohz, domain), {2..5}).

    Like the kernel, every leading comma-separated token that starts with a
    letter is a flag (unknown ones included); the remainder is the cpu list.
    """
    tokens = value.split(",")
    flags: list[str] = []
    while tokens and tokens[0][:1].isalpha():
        flags.append(tokens.pop(0))
    if not tokens:
        raise CpuListError(f"isolcpus={value!r} names no CPUs after its flags")
    return tuple(flags), checked_cpu_list(",".join(tokens))


def parse_cmdline(text: str) -> BootCpuSettings:
    """Read ``isolcpus=`` and ``nohz_full=`` from ``/proc/cmdline`` text.

    A parameter given more than once contributes the union of its lists:
    the kernel applies each occurrence in turn.
    """
    isolcpus: set[int] = set()
    flags: list[str] = []
    nohz_full: set[int] = set()
    for param in split_cmdline(text):
        name, sep, value = param.partition("=")
        if not sep:
            continue
        if name == "isolcpus":
            these_flags, cpus = parse_isolcpus(value)
            flags.extend(flag for flag in these_flags if flag not in flags)
            isolcpus |= cpus
        elif name == "nohz_full":
            nohz_full |= checked_cpu_list(value)
    return BootCpuSettings(
        isolcpus=frozenset(isolcpus), isolcpus_flags=tuple(flags), nohz_full=frozenset(nohz_full)
    )
