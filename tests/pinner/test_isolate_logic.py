"""The pinner's pure parts, with literal values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pinner import cpulist, isolate
from pinner.contract import IsolateExit
from pinner.isolate import (
    IsolateError,
    on_socket,
    parse_args,
    parse_env_cpus,
)

ROOT = Path(__file__).resolve().parents[2]


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
    assert err.value.status == IsolateExit.SOCKET


def test_a_pin_the_kernel_changed_is_refused_naming_both_sets() -> None:
    isolate.check_pinned([2, 3], {2, 3})
    with pytest.raises(IsolateError) as err:
        isolate.check_pinned([2, 3], {2})
    assert (err.value.status, str(err.value)) == (
        IsolateExit.AFFINITY, "cannot pin to CPUs 2-3: the kernel set CPUs 2 (did the container's cpuset change?)"
    )


def test_the_python_pinner_loads_nothing_but_its_contract_and_cpu_lists() -> None:
    """Its start budget (1.3x a bare interpreter) has no room for enum, typing or os."""
    code = ("import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); import pinner.isolate; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    loaded = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                            check=True).stdout.split()
    assert set(loaded) <= {"__future__", "errno", "pinner", "pinner.contract", "pinner.cpulist", "pinner.isolate"}


def test_the_env_form_is_the_one_parser_made_strict() -> None:
    assert parse_env_cpus("CMK_CPUS_SHARED", b"8191") == [8191]
    for raw, detail in [(b"0-3:1/2", "'3:1/2' is not a CPU number"), (b" 2", "' 2' is not a CPU number"),
                        (b"8192", "CPU 8192 is out of range (0-8191)"), ("\u00b2".encode(), "'??' is not a CPU number")]:
        with pytest.raises(IsolateError) as err:
            parse_env_cpus("CMK_CPUS_SHARED", raw)
        assert err.value.status == IsolateExit.MALFORMED
        assert f"is not a cpu list: {detail} (" in str(err.value)
