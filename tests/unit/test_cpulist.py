"""The kernel's cpu-list and mask syntax: parse, format, round-trip, and clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deviceplugin.model.cpulist import (
    CpuListError,
    format_cpu_csv,
    format_cpu_list,
    format_cpu_mask,
    parse_cpu_list,
    parse_cpu_mask,
)
from tests.support import cpulist_cases as cases

cpu_sets = st.frozensets(st.integers(0, 2047), max_size=300)


@pytest.mark.parametrize(("text", "cpus"), cases.LISTS)
def test_parse_cpu_list(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(("text", "message"), cases.MALFORMED_LISTS)
def test_malformed_cpu_lists_name_the_problem(text, message):
    with pytest.raises(CpuListError, match="malformed cpu list") as err:
        parse_cpu_list(text)
    assert message in str(err.value)


@pytest.mark.parametrize(("text", "expected"), cases.ENV_LISTS)
def test_the_env_form_takes_only_plain_lists(text, expected):
    if isinstance(expected, str):
        with pytest.raises(CpuListError) as err:
            parse_cpu_list(text, env=True)
        assert err.value.detail == expected
    else:
        assert parse_cpu_list(text, env=True) == expected


@pytest.mark.parametrize(("text", "cpus"), cases.MASKS)
def test_parse_cpu_mask(text, cpus):
    assert parse_cpu_mask(text) == cpus


@pytest.mark.parametrize("text", cases.MALFORMED_MASKS)
def test_malformed_mask_is_an_error(text):
    with pytest.raises(CpuListError, match="expected hex digits"):
        parse_cpu_mask(text)


@pytest.mark.parametrize(
    ("cpus", "mask"),
    [([0], "1"), ([0, 1], "3"), ([0, 1, 4], "13"), ([10, 11], "C00"), ([63], "8000000000000000"),
     ([64], "10000000000000000"), ([0, 127], "80000000000000000000000000000001")],
)
def test_mask_is_cmks_upper_case_hex_without_prefix(cpus: list[int], mask: str) -> None:
    assert format_cpu_mask(cpus) == mask
    assert parse_cpu_mask(mask) == frozenset(cpus)


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
