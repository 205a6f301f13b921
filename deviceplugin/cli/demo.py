"""``cmk demo``: the seed walkthrough on this machine, no cluster: daemon, kubelet stand-in, a pinned pod.

Takes ``cmk describe``'s flags, so ``--sysfs-root``/``--procfs-root`` and the
plan flags show another machine's pools (its CPUs cannot be pinned here:
the demo says so and runs the containers unpinned).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from deviceplugin.cli.configfile import apply_config_file, defer_defaults
from deviceplugin.cli.converters import seconds
from deviceplugin.cli.flags import (
    NODE_NAME,
    PLAN,
    ROOTS,
    FlagGroup,
    add_flags,
    config_flag,
    plan_options,
)


class Terminated(Exception):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, so everything started is stopped and removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defer_defaults(parser, add_flags(parser, ROOTS, PLAN, FlagGroup(None, (config_flag("the demo"), NODE_NAME))))
    group = parser.add_argument_group("demo")
    group.add_argument("--hold", type=seconds(86400, zero=True), default=0.0, metavar="SECONDS",
                       help="keep the pod's processes running this long before deleting the pod, to "
                            "inspect them (e.g. taskset -cp PID); Enter goes on early (default: 0)")
    group.add_argument("--log-level", default="ERROR", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                       help="log threshold of the daemon and the stand-in, on stderr (default: ERROR)")


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


def run(args: argparse.Namespace) -> int:
    import os

    # gRPC's C core logs connection teardown at INFO when Ctrl-C cuts a registration short.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from deviceplugin.walkthrough import Demo, DemoSettings

    apply_config_file(args)  # before anything starts: a bad file is one line
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = DemoSettings(sysfs_root=Path(args.sysfs_root), procfs_root=Path(args.procfs_root),
                            plan=plan_options(args), hold=args.hold, stdin=sys.stdin)

    def write(line: str) -> None:
        print(line, flush=True)  # line by line: a reader (a test, a pipe) sees each step as it happens

    previous = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        pinned = Demo(settings, write).run()
    except KeyboardInterrupt:
        print("cmk demo: interrupted; everything it started is stopped and removed", file=sys.stderr)
        return 130
    except Terminated as stop:
        print(f"cmk demo: {stop}; everything it started is stopped and removed", file=sys.stderr)
        return 128 + stop.signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not pinned and settings.this_machine:  # this machine's own plan pinned nothing: `cmk demo && ...` must fail
        # (on a dump, the pinner's refusal of CPUs this machine lacks is what the demo promised to show)
        print("cmk demo: error: no container ran pinned: none of the CPUs their devices name are this "
              "process's to give (see the refusals above)", file=sys.stderr)
        return 1
    return 0
