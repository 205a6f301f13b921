"""The ``cmk`` command line: the one place that turns errors into one-line messages and exit codes.

``cmk isolate`` and ``cmk hook`` are dispatched before anything else is
imported and exec the static pinner, the one program every container and the
runtime run, so both work from either program named ``cmk``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("isolate", "hook"):
        return static_pinner(args[0], args[1:])
    import os

    # gRPC's C core writes its own lines to stderr (e.g. "E1201 ... add_port.cc" for a socket path
    # that is too long) before our one-line error; the errors it reports reach us as exceptions.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        from deviceplugin.cli.commands import run

        return run(args)
    except KeyboardInterrupt:  # Ctrl-C while modules still load: no traceback, the shell's status
        return 130
    except BrokenPipeError:  # the reader left (cmk demo | head): quiet, with the status of a SIGPIPE death
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's own flush at exit fails no more
        return 128 + 13


def static_pinner(command: str, args: list[str], binary: Path | None = None) -> int:
    """``cmk isolate`` and ``cmk hook`` are the static pinner's (containers and the runtime may lack Python): exec it."""
    import os

    from deviceplugin.host.installedpinner import (
        BUILD_DOCS,
        build_command,
        built_pinner,
        unbuilt,
    )
    from deviceplugin.model.pinnercontract import (
        HOOK_HELP,
        HOOK_PROG,
        ISOLATE_HELP,
        ISOLATE_PROG,
    )

    binary = binary or built_pinner()
    problem = unbuilt(binary)
    if not problem:
        os.execv(binary, ["cmk", command, *args])
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(HOOK_HELP if command == "hook" else ISOLATE_HELP)
        return 0
    prog, what = (HOOK_PROG, "the hook") if command == "hook" else (ISOLATE_PROG, "the pinner")
    sys.stderr.write(f"{prog}: error: {what} is the static pinner's, and {problem}: build it with "
                     f"'{build_command(binary)}' ({BUILD_DOCS}), or run the installed one, e.g. /opt/bin/cmk {command}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
