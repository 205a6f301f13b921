"""Numbers from the command line for argparse's ``type``: text in, value or ArgumentTypeError out.

Apart from ``flags.py`` so ``cmk probe`` (the kubelet runs it every few seconds) parses its timeout
without loading every flag's module; the grammar itself is the model's (``model/limits.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from deviceplugin.model.limits import parse_count, parse_seconds

T = TypeVar("T")


def _for_argparse(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` with its ValueError as argparse's ArgumentTypeError, so the message reaches the user."""

    def converted(text: str) -> T:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return converted


def bounded(least: int, most: int) -> Callable[[str], int]:
    """A whole number from ``least`` to ``most``."""
    return _for_argparse(lambda text: parse_count(text, least=least, most=most))


def seconds(most: float, *, zero: bool) -> Callable[[str], float]:
    """Seconds up to ``most`` (ASCII decimal, ``2`` or ``0.5``); 0 only where ``zero``."""
    return _for_argparse(lambda text: parse_seconds(text, most=most, zero=zero))
