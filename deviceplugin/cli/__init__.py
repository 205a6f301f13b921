"""The ``cmk`` command line: the one place that turns errors into one-line messages and exit codes.

``cmk isolate`` is dispatched before anything else is imported, so the pinner
starts as fast as the interpreter allows; ``cmk hook`` runs the static
pinner, so ``isolate`` and ``hook`` work from either program named ``cmk``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "isolate":
        from pinner.isolate import main as isolate_main

        return isolate_main(args[1:])
    if args and args[0] == "hook":
        return hook(args[1:])
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


def hook(args: list[str], binary: Path | None = None) -> int:
    """``cmk hook`` is the static pinner's (the runtime runs it on the host, maybe without Python): exec it."""
    import os

    from deviceplugin.host.install import BUILD_DOCS, built_pinner, unbuilt
    from pinner.contract import HOOK_HELP, HOOK_PROG

    binary = binary or built_pinner()
    problem = unbuilt(binary)
    if not problem:
        os.execv(binary, ["cmk", "hook", *args])
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(HOOK_HELP)
        return 0
    sys.stderr.write(f"{HOOK_PROG}: error: the hook is the static pinner's, and {problem}: build it with "
                     f"'python -m pinner.build' ({BUILD_DOCS}), or run the installed one, e.g. /opt/bin/cmk hook\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
