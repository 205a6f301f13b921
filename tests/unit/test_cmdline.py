"""Kernel command-line parsing for isolcpus= and nohz_full= (pure, literal values)."""

from __future__ import annotations

import pytest

from deviceplugin.model.bootparams import (
    BootCpuSettings,
    parse_cmdline,
    parse_isolcpus,
    split_cmdline,
)
from deviceplugin.model.cpulist import CpuListError


@pytest.mark.parametrize(
    ("value", "flags", "cpus"),
    [
        ("2-5", (), {2, 3, 4, 5}),
        ("0-3,8-11", (), {0, 1, 2, 3, 8, 9, 10, 11}),
        ("nohz,domain,managed_irq,2-5", ("nohz", "domain", "managed_irq"), {2, 3, 4, 5}),
        ("domain,1,3,5", ("domain",), {1, 3, 5}),
        ("managed_irq,0-7:2/4", ("managed_irq",), {0, 1, 4, 5}),
        ("future_flag,4", ("future_flag",), {4}),
        ("", (), set()),
    ],
)
def test_isolcpus_flags_are_the_leading_non_numeric_tokens(
    value: str, flags: tuple[str, ...], cpus: set[int]
) -> None:
    assert parse_isolcpus(value) == (flags, frozenset(cpus))


@pytest.mark.parametrize("value", ["nohz,domain", "domain,2-x", "2-5,nohz"])
def test_malformed_isolcpus_is_rejected(value: str) -> None:
    with pytest.raises(CpuListError):
        parse_isolcpus(value)


def test_cmdline_yields_isolcpus_flags_and_nohz_full() -> None:
    settings = parse_cmdline(
        "BOOT_IMAGE=/vmlinuz-6.1 root=/dev/sda1 ro isolcpus=nohz,domain,managed_irq,2-5 nohz_full=2-5 quiet\n"
    )
    assert settings == BootCpuSettings(
        isolcpus=frozenset({2, 3, 4, 5}),
        isolcpus_flags=("nohz", "domain", "managed_irq"),
        nohz_full=frozenset({2, 3, 4, 5}),
    )


def test_cmdline_without_isolation_is_empty() -> None:
    assert parse_cmdline("ro quiet splash isolcpus_extra=3 nohz=on\n") == BootCpuSettings()


def test_repeated_isolcpus_are_united() -> None:
    settings = parse_cmdline("isolcpus=1 isolcpus=domain,3")
    assert settings.isolcpus == {1, 3} and settings.isolcpus_flags == ("domain",)


def test_parameters_after_double_dash_belong_to_init() -> None:
    assert parse_cmdline("ro -- isolcpus=1-3").isolcpus == frozenset()


def test_quotes_group_a_value_with_spaces_and_are_dropped() -> None:
    assert split_cmdline('a dyndbg="file x.c +p" isolcpus="2-3"\x00') == ["a", "dyndbg=file x.c +p", "isolcpus=2-3"]
    assert parse_cmdline('dyndbg="a b" isolcpus="2-3"').isolcpus == {2, 3}
