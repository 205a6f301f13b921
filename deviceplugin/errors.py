"""The one error type library code raises; the CLI turns it into one line and an exit status."""

from __future__ import annotations

import errno
from collections.abc import Callable

#: The kernel's refusals of a user without root's rights (EACCES: a file's mode; EPERM: a missing capability).
DENIED = frozenset({errno.EACCES, errno.EPERM})


class CmkError(Exception):
    """Something the user can fix: the message says what is wrong and how to fix it."""

    def __init__(self, message: str, *, exit_code: int = 1, settings: tuple[str, ...] = ()) -> None:
        """``settings``: the settings (field names) the ``{}`` in ``message`` stand for, in order.

        The model names a setting, never its flag: the edge that took the value says it as the user
        wrote it (:meth:`named`); plain ``str()`` says the setting's own name, ``num-exclusive-cores``.
        """
        self.template = message
        self.settings = settings
        super().__init__(self.named(lambda dest: dest.replace("_", "-")))
        self.exit_code = exit_code

    def named(self, name: Callable[[str], str]) -> str:
        """The message with each setting said by ``name`` (e.g. as ``--num-exclusive-cores``)."""
        pieces = self.template.split("{}")
        names = [*map(name, self.settings), *[""] * (len(pieces) - 1 - len(self.settings))]
        return "".join(piece + said for piece, said in zip(pieces, [*names, ""], strict=False))


def one_line(text: object) -> str:
    """``text`` for a one-line message: control characters (a newline in a path, a library's) escaped."""
    message = str(text)
    if message.isprintable():
        return message
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in message)


def os_reason(err: OSError) -> str:
    """Why an OS call failed, for a one-line message; a refusal also says the fix (the node's files are root's)."""
    reason = err.strerror or str(err)
    return f"{reason} (run as root, or with the capability it needs)" if err.errno in DENIED else reason
