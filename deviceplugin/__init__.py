"""CPU pools as kubelet device plugins: the node daemon and its tools."""

import platform

#: The release, in this one place: setup.cfg reads it, ``cmk --version`` prints it, the daemon logs it and
#: exports it as ``cmk_build_info``; the image tag, the kustomize base and the chart name it too (a test checks).
__version__ = "0.1.0"


def build_info() -> dict[str, str]:
    """What this build is, for the daemon's start line and ``cmk_build_info``: one source for both."""
    return {"version": __version__, "python": platform.python_version(), "machine": platform.machine()}
