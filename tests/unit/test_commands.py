"""The ``cmk`` command line: each subcommand's flags, and only its modules, for the one chosen."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deviceplugin.cli.commands import SUBCOMMANDS, build_parser
from tests.support.commands import cmk

PROBE = """
import sys
from deviceplugin.cli.commands import run
try:
    run([{argv}])
except SystemExit:
    pass
print(sorted(name for name in sys.modules if name.startswith("deviceplugin.cli.") and name != "deviceplugin.cli.commands"))
"""


@pytest.mark.parametrize("chosen", sorted(SUBCOMMANDS))
def test_parsing_one_subcommand_imports_only_its_own_module(chosen: str) -> None:
    """The daemon's start must not load describe's view and YAML only to parse its own flags."""
    argv = ", ".join(repr(word) for word in [chosen, "--help"])
    loaded = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True,
                            check=True).stdout.splitlines()[-1]
    others = [module for name, (module, _) in SUBCOMMANDS.items() if name != chosen]
    assert SUBCOMMANDS[chosen][0] in loaded
    assert not [module for module in others if f"'{module}'" in loaded]


def test_the_whole_parser_still_knows_every_subcommands_flags() -> None:
    parser = build_parser()
    assert parser.parse_args(["describe", "--usage-window", "0"]).usage_window == 0
    assert parser.parse_args(["device-plugin", "--no-nfd"]).nfd is False


def test_a_flag_of_another_subcommand_is_refused_by_the_chosen_ones_parser(capsys: pytest.CaptureFixture[str]) -> None:
    from deviceplugin.cli.commands import run

    with pytest.raises(SystemExit) as raised:
        run(["device-plugin", "--usage-window", "0"])
    assert raised.value.code == 2
    assert "unrecognized arguments: --usage-window" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["describe", "--num-exclusive", "3"],
    ["device-plugin", "--kubelet", "/tmp/x"],
    ["host-config", "--reserved", "2"],
    ["demo", "--num-exc=2"],
])
def test_an_abbreviated_flag_is_refused_against_the_subcommands_usage(argv: list[str]) -> None:
    """``--num-exclusive 3`` is not ``--num-exclusive-cores 3``: a flag added later would change what it meant."""
    result = cmk(*argv)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"cmk {argv[0]}: error: unrecognized arguments: {argv[1]}"), result.stderr
    assert result.stderr.endswith(f"(see 'cmk {argv[0]} --help')\n"), result.stderr


def test_an_unknown_flag_names_the_subcommands_usage_and_one_before_it_the_top_level() -> None:
    result = cmk("describe", "--bogus")
    assert (result.returncode, result.stderr) == (
        2, "cmk describe: error: unrecognized arguments: --bogus (see 'cmk describe --help')\n")
    result = cmk("--bogus", "describe")
    assert result.returncode == 2 and "(see 'cmk --help')" in result.stderr, result.stderr
