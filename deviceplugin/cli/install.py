"""``cmk install``: put the self-contained pinner into the host's install directory (:mod:`deviceplugin.host.install`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from deviceplugin.cli.flags import host_dir
from deviceplugin.host.install import DEFAULT_INSTALL_DIR, built_pinner, install_pinner


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--install-dir",
        type=lambda text: Path(host_dir(text)),
        default=DEFAULT_INSTALL_DIR,
        metavar="DIR",
        help=f"host directory to install the self-contained pinner into (default: {DEFAULT_INSTALL_DIR})",
    )


def run(args: argparse.Namespace) -> int:
    target = install_pinner(built_pinner(), args.install_dir)
    print(f"installed {target}")
    return 0
