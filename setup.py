"""Build hook only (metadata lives in setup.cfg): compile the self-contained pinner into the package.

The C units of ``pinner/native/`` become ``pinner/bin/cmk`` (a static executable) so
``cmk install`` can copy it to the host. Without a compiler the package still
installs; ``cmk install`` then says how to build the pinner.
"""

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class BuildPyWithPinner(build_py):
    def run(self) -> None:
        super().run()
        from pinner.build import DEFAULT_OUTPUT, BuildError, build

        # An editable install imports pinner from the source tree, where cmk install looks for the binary;
        # build_lib is then a temporary directory pip throws away.
        output = DEFAULT_OUTPUT if self.editable_mode else Path(self.build_lib) / "pinner" / "bin" / "cmk"
        # A pinner an earlier build left there (pip reuses the checkout's build/) was built from older sources:
        # a build that fails now must leave none, or the wheel ships the old one under the "not built" warning.
        output.unlink(missing_ok=True)
        try:
            compiler, _ = build(output)
        except BuildError as err:
            print(f"warning: the self-contained pinner was not built, so 'cmk install' will fail: {err}",
                  file=sys.stderr)
        else:
            print(f"built {output} with {compiler}")


class BinaryDistribution(Distribution):
    """The wheel carries a native executable, so it is tagged for this platform, not 'any'."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithPinner}, distclass=BinaryDistribution)
