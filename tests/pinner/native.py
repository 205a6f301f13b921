"""The self-contained pinner for tests: the package data binary, (re)built when missing or stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinner.build import DEFAULT_OUTPUT, HEADER, SOURCE, BuildError, build


def ensure_native_pinner() -> Path:
    """Build ``pinner/bin/cmk`` unless it is newer than its sources; fail the test if it cannot be."""
    if DEFAULT_OUTPUT.is_file() and DEFAULT_OUTPUT.stat().st_mtime >= max(
        SOURCE.stat().st_mtime, HEADER.stat().st_mtime
    ):
        return DEFAULT_OUTPUT
    try:
        build(DEFAULT_OUTPUT)
    except BuildError as err:
        pytest.fail(f"the self-contained pinner could not be built: {err}")
    return DEFAULT_OUTPUT
