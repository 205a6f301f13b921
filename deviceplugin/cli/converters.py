"""Numbers from the command line for argparse's ``type``: text in, value or ArgumentTypeError out.

Apart from ``flags.py`` so ``cmk probe`` (the kubelet runs it every few seconds) parses its timeout
without loading every flag's module; the grammar itself is the model's (``model/limits.py``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from deviceplugin.model.limits import parse_count, parse_seconds


def bounded(least: int, most: int) -> Callable[[str], int]:
    """A whole number from ``least`` to ``most``."""

    def parse(text: str) -> int:
        try:
            return parse_count(text, least=least, most=most)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def seconds(most: float, *, zero: bool) -> Callable[[str], float]:
    """Seconds up to ``most`` (ASCII decimal, ``2`` or ``0.5``); 0 only where ``zero``."""

    def parse(text: str) -> float:
        try:
            return parse_seconds(text, most=most, zero=zero)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse
