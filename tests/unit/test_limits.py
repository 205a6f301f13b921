"""The strict parsers behind every flag, config key and sysfs number: bounded, ASCII, one-line errors."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.cli.safeyaml import MAX_DEPTH, YamlProblem, load_yaml
from deviceplugin.host.installedpinner import (
    DEFAULT_INSTALL_DIR,
    SYSTEM_DIRS,
    SYSTEM_TREES,
    checked_hooks_dir,
    checked_install_dir,
)
from deviceplugin.model.limits import (
    MAX_CPUS,
    CpuListError,
    checked_cpu_list,
    checked_cpu_mask,
    parse_count,
)

NUMBERISH = st.text(st.sampled_from("0123456789+-_ .e٣１x\n"), max_size=30) | st.text(max_size=30)


@given(NUMBERISH)
def test_a_count_is_canonical_ascii_decimal_in_bounds_or_one_line_error(text: str) -> None:
    try:
        value = parse_count(text, least=0, most=10_000)
    except ValueError as err:
        assert "\n" not in str(err)
        return
    assert 0 <= value <= 10_000 and str(value) == text


@pytest.mark.parametrize("text", ["+1", "1_000", " 1", "٣", "１", "010", "0x10", "1e3", "9" * 5000, "99999999999999999999"])
def test_what_int_takes_a_count_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="expected a whole number|or less"):
        parse_count(text, least=0, most=MAX_CPUS)


@given(st.text(st.sampled_from("0123456789-,:/ ٣x\x00"), max_size=40) | st.text(max_size=40))
def test_a_cpu_list_stays_below_the_kernel_limit_or_is_one_line_error(text: str) -> None:
    try:
        cpus = checked_cpu_list(text)
    except CpuListError as err:
        assert "\n" not in str(err)
        return
    assert all(0 <= cpu < MAX_CPUS for cpu in cpus)


def test_a_mask_wider_than_the_kernel_limit_is_refused() -> None:
    assert checked_cpu_mask("f" * (MAX_CPUS // 4)) == frozenset(range(MAX_CPUS))
    with pytest.raises(CpuListError, match="at most 2048 hex digits"):
        checked_cpu_mask("1" + "0" * (MAX_CPUS // 4))


PATHISH = (st.text(st.sampled_from("/.a\n\x01"), max_size=20) | st.text(max_size=20)
           | st.sampled_from(sorted(SYSTEM_DIRS | {tree.rstrip("/") for tree in SYSTEM_TREES})))


def _fit_path_or_one_line_problem(check: Callable[[str], str], text: str) -> bool:
    """True if ``check`` accepts ``text`` (then a normalised, absolute, printable path), False if it refused it."""
    try:
        assert check(text) == text
    except ValueError as err:
        assert "\n" not in str(err)
        return False
    assert text.startswith("/") and os.path.normpath(text) == text and not text.startswith("//")
    assert text.isprintable() and text not in SYSTEM_DIRS
    return True


@given(PATHISH)
def test_an_install_dir_is_normalised_absolute_printable_and_not_a_system_dir(text: str) -> None:
    if _fit_path_or_one_line_problem(checked_install_dir, text):
        assert not (text + "/").startswith(SYSTEM_TREES)


@given(PATHISH)
def test_a_hooks_dir_is_normalised_absolute_printable_and_not_a_system_dir_itself(text: str) -> None:
    if _fit_path_or_one_line_problem(checked_hooks_dir, text):
        assert text + "/" not in SYSTEM_TREES


def test_the_runtimes_hooks_dirs_are_fit() -> None:
    for directory in ("/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d"):
        assert checked_hooks_dir(directory) == directory


def test_the_default_install_dir_is_fit() -> None:
    assert checked_install_dir(str(DEFAULT_INSTALL_DIR)) == str(DEFAULT_INSTALL_DIR)


YAMLISH = st.text(st.sampled_from("ab:-[]{}&*!|>'\"#\n\t 0123456789,?%@`\\~"), max_size=60) | st.text(max_size=60)


@settings(max_examples=300)
@given(YAMLISH)
def test_any_text_loads_or_is_one_line_yaml_problem(text: str) -> None:
    try:
        load_yaml(text, "config.yaml")
    except YamlProblem as err:
        assert "\n" not in str(err) and str(err).startswith("config.yaml")


@pytest.mark.parametrize(("text", "value"), [
    ("a: 1:50", {"a": "1:50"}), ("a: 010", {"a": "010"}), ("a: +1", {"a": "+1"}), ("a: 1_000", {"a": "1_000"}),
    ("a: 0x10", {"a": "0x10"}), ("a: 1.5", {"a": "1.5"}), ("a: yes", {"a": "yes"}), ("a: 12", {"a": 12}),
    ("a: -1", {"a": -1}), ("a: true", {"a": True}), ("a: ~", {"a": None}), ("a: [1, '2']", {"a": [1, "2"]}),
    ("a: " + "9" * 20, {"a": "9" * 20}), ("", None),
])
def test_scalars_resolve_by_the_narrowed_yaml_1_2_core_schema(text: str, value: object) -> None:
    assert load_yaml(text, "c") == value


@pytest.mark.parametrize(("text", "problem"), [
    ("a: &x 1\nb: *x", "anchors"), ("b: *x", "alias"), ("a: !!python/name:os.system x", "tag"),
    ("a: !!int 3", "tag"), ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "deeper"),
    ("a: 1\na: 2", "appears twice"), ("a: 1\n---\nb: 2", "single document"), ("[a, b] : 1\n", "list or mapping"),
])
def test_what_could_explode_or_mislead_is_refused(text: str, problem: str) -> None:
    with pytest.raises(YamlProblem, match=problem):
        load_yaml(text, "c")
