"""The one error type library code raises; the CLI turns it into one line and an exit status."""

from __future__ import annotations


class CmkError(Exception):
    """Something the user can fix: the message says what is wrong and how to fix it."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def one_line(text: object) -> str:
    """``text`` for a one-line message: control characters (a newline in a path, a library's) escaped."""
    message = str(text)
    if message.isprintable():
        return message
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in message)
