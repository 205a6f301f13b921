"""Column alignment for every table cmk prints (describe, its live view, the demo)."""

from __future__ import annotations


def align_columns(rows: list[list[str]], indent: str = "") -> list[str]:
    """Left-aligned columns two spaces apart, trailing blanks trimmed: every table cmk prints."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
