"""The ``cmk`` command line: the one place that turns errors into one-line messages and exit codes.

``cmk isolate`` is dispatched before anything else is imported, so the pinner
starts as fast as the interpreter allows.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "isolate":
        from pinner.isolate import main as isolate_main

        return isolate_main(args[1:])
    import os

    # gRPC's C core writes its own lines to stderr (e.g. "E1201 ... add_port.cc" for a socket path
    # that is too long) before our one-line error; the errors it reports reach us as exceptions.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        from deviceplugin.cli.commands import run

        return run(args)
    except KeyboardInterrupt:  # Ctrl-C while modules still load: no traceback, the shell's status
        return 130


if __name__ == "__main__":
    sys.exit(main())
