"""The fastest Python entry: ``python3 -I -S .../pinner/cmk_isolate.py [ARGS]`` is ``cmk isolate [ARGS]``.

A script is compiled on every run, a module is loaded from its cached
bytecode; so this stays a few lines and imports ``pinner.isolate``, putting
its own package's parent on the path (``-I`` leaves the script's directory
out and ``-S`` leaves out site-packages).
"""

import sys


def run() -> int:
    sys.path.insert(0, __file__.rpartition("/")[0].rpartition("/")[0] or ".")
    from pinner.isolate import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
