"""One declaration per setting: a settings dataclass's field, with its help and bounds, read by every edge.

A field declared with :func:`setting` is a setting named after it (``num_exclusive_cores`` is
``num-exclusive-cores``) whose type and default are the field's own; the command line's flag, the
config file's key and its check, the last-good plan file, the chart's schema and the docs table are
derived from it (``deviceplugin/cli/flags.py``, ``tools/settings.py``). Values are checked there, at
the edge; the model takes them typed and never names a flag.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Any, get_args


@dataclass(frozen=True, kw_only=True)
class Setting:
    """What a field's type and default do not say: its meaning, its default in words, its bounds."""

    #: what it means, one phrase without the default (the flag's help and the docs table's meaning)
    help: str
    #: the default in words (the help's "(default: ...)" and the table's default column)
    default_text: str
    metavar: str | None = None
    #: a whole number's bounds
    least: int | None = None
    most: int | None = None


def setting(default: Any, *, help: str, default_text: str | None = None, metavar: str | None = None,
            least: int | None = None, most: int | None = None) -> Any:
    """A dataclass field declaring a setting (``default_text`` defaults to the default's own text)."""
    text = str(default) if default_text is None else default_text
    declared = Setting(help=help, default_text=text, metavar=metavar, least=least, most=most)
    return field(default=default, metadata={"setting": declared})


@dataclass(frozen=True)
class Declared:
    """A declared setting as the edges see it: name, field, type, default and the rest of its declaration."""

    name: str
    dest: str
    type: Any
    default: Any
    setting: Setting

    @property
    def kind(self) -> Any:
        """The field's type without ``| None`` (None is a default meaning "not given", never a value)."""
        if isinstance(self.type, UnionType):
            (kind,) = [arg for arg in get_args(self.type) if arg is not type(None)]
            return kind
        return self.type

    def within(self, value: int) -> bool:
        """A whole number in the declared bounds."""
        low, high = self.setting.least, self.setting.most
        return (low is None or value >= low) and (high is None or value <= high)


def declared(cls: type) -> tuple[Declared, ...]:
    """The settings a dataclass declares, in field order."""
    hints = typing.get_type_hints(cls)
    return tuple(Declared(item.name.replace("_", "-"), item.name, hints[item.name], item.default,
                          item.metadata["setting"])
                 for item in fields(cls) if "setting" in item.metadata)


def setting_name(dest: str) -> str:
    """``num_exclusive_cores`` -> ``num-exclusive-cores``: the flag's name without dashes, the file's key."""
    return dest.replace("_", "-")
