"""Subcommands of ``cmk`` (all but ``isolate`` and ``hook``, which ``cli`` dispatches first).

Each subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> int``,
imported only when chosen so one command's dependencies never slow another.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NoReturn

from deviceplugin.errors import CmkError, one_line
from deviceplugin.model.pinnercontract import VERSION_TEXT

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "describe": ("deviceplugin.cli.describe", "show the CPU topology and the pool plan"),
    "demo": ("deviceplugin.cli.demo", "run the seed pod on this machine with no cluster: daemon, kubelet stand-in, pinned processes"),
    "host-config": ("deviceplugin.cli.host_config",
                    "print the kernel, kubelet and systemd settings the node needs for the pools"),
    "probe": ("deviceplugin.cli.probe",
              "exit 0 when the daemon's device-plugin sockets answer (every one it serves; at least one)"),
    "device-plugin": ("deviceplugin.cli.device_plugin", "serve the pools to the kubelet (the node daemon)"),
    "install": ("deviceplugin.cli.install", "install the self-contained pinner into the host's install directory"),
}


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the fix, exit status 2.

    No abbreviations: ``--num-exclusive 3`` is refused, not taken as ``--num-exclusive-cores``, so a
    flag added later can never change what an abbreviation in someone's script meant.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see '{self.prog} --help')\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # argparse drops "--" from "--flag=--" and then passes [] on as the flag's value.
        if action.nargs is None and action.option_strings and arg_strings in (["--"], []):
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, got '--'")
        return super()._get_values(action, arg_strings)


class SubcommandParser(OneLineParser):
    """A subcommand's parser: it refuses what it does not know itself, so the error names its usage
    (``cmk describe --help``), not the top-level one argparse would hand the leftovers to."""

    def parse_known_args(  # type: ignore[override]  # argparse's overloads by namespace type; this takes any
            self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``chosen`` (a subcommand's name), only that subcommand's flags.

    Each subcommand's module defines its flags, so building all of them
    imports every command: the daemon would load ``describe``'s view and
    YAML (a tenth of its start on 8,192 CPUs, ~3 MB resident) only to parse
    its own flags. The other subcommands stay listed, with their help.
    """
    parser = OneLineParser(prog="cmk", description="CPU pools as kubelet device plugins.")
    parser.add_argument("-V", "--version", action="version", version=VERSION_TEXT)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=SubcommandParser)
    sub.required = True
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if chosen in (None, name):
            importlib.import_module(module).add_arguments(sub_parser)
        sub_parser.set_defaults(_module=module)
    # The operator's commands first; these two run inside workload containers and on the runtime's side.
    sub.add_parser("isolate", help="(in a workload container) run a command pinned to a pool's CPUs "
                                   "(CMK-compatible)")
    sub.add_parser("hook", help="(run by the container runtime) the OCI hook the CDI spec runs: confine a "
                                "container to its CPUs (runs the static pinner)")
    return parser


def run(argv: list[str]) -> int:
    named = next((word for word in argv if not word.startswith("-")), None)  # cmk's own flags take no value
    args = build_parser(named if named in SUBCOMMANDS else None).parse_args(argv)
    try:
        return importlib.import_module(args._module).run(args)
    except CmkError as err:
        from deviceplugin.cli.configfile import at_edge

        print(f"cmk {args.command}: error: {one_line(str(at_edge(err, args)))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
