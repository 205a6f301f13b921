"""``cmk install``: put the self-contained pinner into the host's install directory (:mod:`deviceplugin.host.installedpinner`).

Beside it, the node-wide hook's files (:mod:`deviceplugin.host.nodewide`): the
hooks.d declaration (also into ``--hooks-dir``, where podman and CRI-O read it)
and the infra record, planned from the same flags or ``--config`` file as the
daemon's, so every container of the node is confined from the daemon's own
pod on (the DaemonSet runs this as its init container, before the daemon).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from deviceplugin.cli.configfile import apply_config_file, defer_defaults
from deviceplugin.cli.flags import (
    INSTALL,
    PLAN,
    ROOTS,
    add_flags,
    host_dir,
    plan_options,
)
from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.installedpinner import (
    DEFAULT_INSTALL_DIR,
    built_pinner,
    install_pinner,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--install-dir",
        type=lambda text: Path(host_dir(text)),
        default=DEFAULT_INSTALL_DIR,
        metavar="DIR",
        help=f"host directory to install the self-contained pinner into (default: {DEFAULT_INSTALL_DIR})",
    )
    defer_defaults(parser, add_flags(parser, INSTALL, ROOTS, PLAN))


def run(args: argparse.Namespace) -> int:
    from deviceplugin.host import nodewide
    from deviceplugin.host.sysfs import discover
    from deviceplugin.model.cdispec import hook_path
    from deviceplugin.model.node import plan_node
    from deviceplugin.model.plan import Pool

    apply_config_file(args)
    install_dir = Path(args.install_dir)
    plan = plan_node(discover(args.sysfs_root, args.procfs_root), plan_options(args)).plan  # a bad plan: nothing written
    target = install_pinner(built_pinner(), install_dir)
    print(f"installed {target}")
    binary, record = hook_path(str(install_dir.absolute())), str(nodewide.record_path(install_dir.absolute()))
    try:
        written = nodewide.write_record(install_dir, plan.cpus(Pool.INFRA))
        print(f"{'wrote' if written else 'kept'} the infra record {record} (CPUs "
              f"{nodewide.record_text(plan.cpus(Pool.INFRA)).strip()})")
        for directory in [install_dir, *args.hooks_dir]:
            print(f"wrote the node-wide hook's declaration {nodewide.write_declaration(directory, binary, record)}")
    except OSError as err:
        raise CmkError(f"cannot write the node-wide hook's files: {err.filename}: {os_reason(err)}") from None
    return 0
