"""The self-contained pinner for tests: the package data binary, (re)built when missing or stale."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pinner.build import DEFAULT_OUTPUT, NATIVE, BuildError, build


def ensure_native_pinner() -> Path:
    """Build ``pinner/bin/cmk`` unless it is newer than every unit and header; fail the test if it cannot be."""
    if DEFAULT_OUTPUT.is_file() and DEFAULT_OUTPUT.stat().st_mtime >= max(
        source.stat().st_mtime for source in NATIVE.iterdir() if source.suffix in (".c", ".h")
    ):
        return DEFAULT_OUTPUT
    try:
        build(DEFAULT_OUTPUT)
    except BuildError as err:
        pytest.fail(f"the self-contained pinner could not be built: {err}")
    return DEFAULT_OUTPUT


PT_INTERP = 3


def program_header_types(path: Path) -> list[int]:
    """The ELF program header types: a dynamically linked executable has PT_INTERP (its loader)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, f"{path} is not a 64-bit ELF file"
    endian = "<" if data[5] == 1 else ">"
    phoff, = struct.unpack_from(endian + "Q", data, 0x20)
    phentsize, phnum = struct.unpack_from(endian + "HH", data, 0x36)
    return [struct.unpack_from(endian + "I", data, phoff + i * phentsize)[0] for i in range(phnum)]
