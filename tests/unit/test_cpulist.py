"""The kernel's cpu-list and mask syntax: parse, format, round-trip, and clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pinner.contract import MAX_CPUS
from pinner.cpulist import (
    CpuListError,
    format_cpu_csv,
    format_cpu_list,
    format_cpu_mask,
    parse_cpu_list,
    parse_cpu_mask,
)

cpu_sets = st.frozensets(st.integers(0, 2047), max_size=300)


@pytest.mark.parametrize(("text", "cpus"), [
    ("", set()),
    ("\n", set()),
    ("0", {0}),
    ("0-3,8\n", {0, 1, 2, 3, 8}),
    ("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}),
    (" 2 , 5-6 ", {2, 5, 6}),
    ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
    ("1-9:1/3", {1, 4, 7}),
    ("0-3\x00\x00", {0, 1, 2, 3}),
    ("3,1,2", {1, 2, 3}),
])
def test_parse_cpu_list(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(("text", "message"), [
    ("a", "'a' is not a CPU number"),
    ("0-", "'' is not a CPU number"),
    ("3-1", "range '3-1' runs backwards"),
    ("1,,2", "empty entry between commas"),
    ("0-7:3", "needs USED/GROUP"),
    ("0-7:5/4", "needs 0 < USED <= GROUP"),
    ("-1", "is not a CPU number"),
    ("99999999", "out of range"),
])
def test_malformed_cpu_lists_name_the_problem(text, message):
    with pytest.raises(CpuListError, match="malformed cpu list") as err:
        parse_cpu_list(text)
    assert message in str(err.value)


@pytest.mark.parametrize(("text", "cpus"), [
    ("00000000,0000ff0f\n", {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}),
    ("80000000,00000001", {0, 63}),
    ("0", set()),
    ("", set()),
    ("0x3", {0, 1}),
])
def test_parse_cpu_mask(text, cpus):
    assert parse_cpu_mask(text) == cpus


def test_malformed_mask_is_an_error():
    with pytest.raises(CpuListError, match="expected hex digits"):
        parse_cpu_mask("00zz")


def test_format_collapses_runs():
    assert format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""
    assert format_cpu_csv({9, 1, 8, 0}) == "0,1,8,9"
    assert format_cpu_mask({0, 1, 8}) == "103"  # CMK: hex(mask)[2:].upper()


@given(cpu_sets)
def test_list_round_trips(cpus):
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus
    assert parse_cpu_list(format_cpu_csv(cpus)) == cpus


@given(cpu_sets)
def test_mask_round_trips(cpus):
    assert parse_cpu_mask(format_cpu_mask(cpus)) == cpus


@given(cpu_sets)
def test_format_is_canonical(cpus):
    text = format_cpu_list(cpus)
    assert format_cpu_list(parse_cpu_list(text)) == text


def test_one_cpu_limit_for_every_list_the_kernels_largest_nr_cpus() -> None:
    assert parse_cpu_list(f"{MAX_CPUS - 1}") == {MAX_CPUS - 1}
    with pytest.raises(CpuListError, match=f"CPU {MAX_CPUS} is out of range"):
        parse_cpu_list(f"0-{MAX_CPUS}")


@pytest.mark.parametrize("text", ["\u0663", "\u00b2", "1" * 10])
def test_only_ascii_digits_up_to_nine_are_cpu_numbers(text: str) -> None:
    with pytest.raises(CpuListError, match="is not a CPU number"):
        parse_cpu_list(text)
