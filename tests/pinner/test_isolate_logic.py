"""The pinner's pure parts, with literal values."""

from __future__ import annotations

import pytest

from pinner import cpulist, isolate
from pinner.isolate import (
    IsolateError,
    on_socket,
    parse_args,
    parse_env_cpus,
)


@pytest.mark.parametrize(
    ("cpus", "mask"),
    [([0], "1"), ([0, 1], "3"), ([0, 1, 4], "13"), ([10, 11], "C00"), ([63], "8000000000000000"),
     ([64], "10000000000000000"), ([0, 127], "80000000000000000000000000000001")],
)
def test_mask_is_cmks_upper_case_hex_without_prefix(cpus: list[int], mask: str) -> None:
    assert cpulist.format_cpu_mask(cpus) == mask
    assert cpulist.parse_cpu_mask(mask) == frozenset(cpus)


def test_env_list_accepts_the_contract_form_and_ranges() -> None:
    assert parse_env_cpus("CMK_CPUS_SHARED", b"2,3,10") == [2, 3, 10]
    assert parse_env_cpus("CMK_CPUS_SHARED", b"0-2,8") == [0, 1, 2, 8]


def test_cmk_form_splits_command_from_its_arguments_at_the_dashes() -> None:
    req = parse_args(["--pool=exclusive", "--namespace=cmk-namespace", "sleep", "--", "inf"])
    assert (req.pool, req.command, req.args, req.socket_id, req.no_affinity) == ("exclusive", "sleep", ["inf"], -1, False)


def test_plain_form_takes_the_command_after_the_dashes() -> None:
    req = parse_args(["--pool", "shared", "--socket-id", "1", "--no-affinity", "--", "sleep", "inf", "--"])
    assert (req.pool, req.command, req.args, req.socket_id, req.no_affinity) == ("shared", "sleep", ["inf", "--"], 1, True)


def test_socket_filter_keeps_the_cpus_of_that_package() -> None:
    assert on_socket("exclusive", [2, 3, 10, 11], 1, [0, 0, 1, 1]) == [10, 11]
    with pytest.raises(IsolateError) as err:
        on_socket("exclusive", [2, 3], 1, [0, 0])
    assert err.value.status == isolate.EXIT_SOCKET


def test_exit_statuses_are_distinct() -> None:
    statuses = [value for name, value in vars(isolate).items() if name.startswith("EXIT_")]
    assert len(statuses) == len(set(statuses))


def test_a_pin_the_kernel_changed_is_refused_naming_both_sets() -> None:
    isolate.check_pinned([2, 3], {2, 3})
    with pytest.raises(IsolateError) as err:
        isolate.check_pinned([2, 3], {2})
    assert (err.value.status, str(err.value)) == (
        isolate.EXIT_AFFINITY, "cannot pin to CPUs 2-3: the kernel set CPUs 2 (did the container's cpuset change?)"
    )
