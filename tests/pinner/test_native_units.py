"""The C pinner's units alone, through their TEST_PROGRAM drivers (util-linux's model), built with ASan and UBSan.

``cpulist.c`` answers the very case table ``tests/unit/test_cpulist.py`` runs
through ``deviceplugin/model/cpulist.py`` (``tests.support.cpulist_cases``), so the two
parsers keep one grammar; ``json.c`` answers the JSON table below. A
sanitizer report fails the case (its exit status is neither 0 nor 1).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.hookcontract import MAX_JSON_DEPTH
from deviceplugin.model.pinnercontract import MAX_CPUS
from pinner.build import BuildError, build_test_program
from tests.support import cpulist_cases as cases

ENV = {"ASAN_OPTIONS": "detect_leaks=0:exitcode=99", "UBSAN_OPTIONS": "halt_on_error=1:exitcode=98"}
NOT_JSON = "the input is not valid JSON: "


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory):
    built: dict[str, Path] = {}

    def run(unit: str, data: bytes, *args: str) -> tuple[int, str]:
        if unit not in built:
            output = tmp_path_factory.mktemp(unit) / f"{unit}-test"
            try:
                build_test_program(unit, output)
            except BuildError as err:
                pytest.fail(str(err))
            built[unit] = output
        result = subprocess.run([str(built[unit]), *args], input=data, env=ENV, capture_output=True, timeout=30,
                                check=False)
        assert result.returncode in (0, 1), result.stderr.decode(errors="replace")[-2000:]
        return result.returncode, result.stdout.decode("utf-8", "surrogateescape").removesuffix("\n")

    return run


@pytest.mark.parametrize(("text", "cpus"), cases.LISTS)
def test_the_kernel_form_parses_as_in_python(driver, text: str, cpus: set[int]) -> None:
    assert driver("cpulist", text.encode(), "list") == (0, format_cpu_list(cpus))


@pytest.mark.parametrize(("text", "message"), cases.MALFORMED_LISTS)
def test_the_kernel_form_refuses_as_python_does(driver, text: str, message: str) -> None:
    status, detail = driver("cpulist", text.encode(), "list")
    assert status == 1 and message in detail


@pytest.mark.parametrize(("text", "expected"), cases.ENV_LISTS)
def test_the_env_form_takes_what_python_takes(driver, text: str, expected: set[int] | str) -> None:
    wanted = (1, expected) if isinstance(expected, str) else (0, format_cpu_list(expected))
    assert driver("cpulist", text.encode(), "env") == wanted


@pytest.mark.parametrize(("text", "cpus"), cases.MASKS)
def test_masks_parse_as_in_python(driver, text: str, cpus: set[int]) -> None:
    assert driver("cpulist", text.encode(), "mask") == (0, format_cpu_list(cpus))


@pytest.mark.parametrize("text", [*cases.MALFORMED_MASKS, "1" + "0" * (MAX_CPUS // 4)])
def test_malformed_masks_are_refused(driver, text: str) -> None:
    assert driver("cpulist", text.encode(), "mask")[0] == 1


@pytest.mark.parametrize(("text", "shown"), [
    ('{"a":[1,true,null,"x"]}', '{"a":[1,true,null,"x"]}'),
    ('  {"pid": 42, "bundle": "/b"} \n', '{"pid":42,"bundle":"/b"}'),
    ('[]', '[]'),
    ('{}', '{}'),
    ('-0.5e+3', '-0.5e+3'),
    (r'"\u00e9\ud83d\ude00"', '"\u00e9\U0001f600"'),  # a surrogate pair is one code point
    (r'"\ud800x"', '"\ufffdx"'),  # a lone surrogate is U+FFFD, as Go decodes it
    (r'"a\u0000b"', r'"a\u0000b"'),  # strings may hold NULs
    (r'"\/\b\f\n\r\t\"\\"', r'"/\u0008\u000c\u000a\u000d\u0009\"\\"'),
    ('{"a":1,"a":2}', '{"a":1,"a":2}'),
])
def test_json_values_decode(driver, text: str, shown: str) -> None:
    assert driver("json", text.encode()) == (0, shown)


@pytest.mark.parametrize(("text", "message"), [
    ("", "expected a JSON value at its end (it is empty)"),
    ('{"a":1,}', "expected a '\"' starting a member name at byte 7"),
    ("[1 2]", "expected ',' or ']' at byte 3"),
    ("01", "expected the end of the input after the value at byte 1"),
    (r'"\x"', r"expected one of \" \\ \/ \b \f \n \r \t \uXXXX at byte 2"),
    ("[1,", "expected a JSON value at its end"),
    ('{"a" 1}', "expected ':' after a member name at byte 5"),
    ("nul", "expected a JSON value at byte 0"),
    ("1.", "expected a digit after '.' at its end"),
    ("1e", "expected a digit in the exponent at its end"),
    (r'"\u12"', r"expected four hex digits after \u at byte 3"),
    ('"\x01"', "a raw control character inside a string at byte 1"),
    ("[" * (MAX_JSON_DEPTH + 1), f"nesting deeper than {MAX_JSON_DEPTH} levels at byte {MAX_JSON_DEPTH}"),
])
def test_json_refusals_name_the_byte(driver, text: str, message: str) -> None:
    assert driver("json", text.encode()) == (1, NOT_JSON + message)
