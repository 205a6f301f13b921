"""The DRA plugin's prepared-claims checkpoint on disk: read whole, replaced whole (never half-written)."""

from __future__ import annotations

from pathlib import Path

from deviceplugin.host.atomic import write_atomically

#: Claims name pods' namespaces and names: readable by root only.
MODE = 0o600


class ClaimFile:
    """A :class:`~deviceplugin.protocol.draplugin.ClaimStore` on one file; OSError propagates to the plugin."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def save(self, data: bytes) -> None:
        write_atomically(self.path, data, mode=MODE)
