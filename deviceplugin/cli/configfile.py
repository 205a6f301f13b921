"""``--config FILE``: the daemon's flags as a YAML mapping, so a ConfigMap can carry them.

Keys are the long flag names without dashes in front (``num-exclusive-cores: 4``);
a flag given on the command line wins over the file, the file over the
flag's default. Values go through the same checks as the flags, and an
unknown key or a wrong type is a one-line error naming the key.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path

from deviceplugin.cli.flags import FILE_KEYS, Flag
from deviceplugin.errors import CmkError


class ConfigError(CmkError):
    """The config file is unreadable, not a mapping, or holds an unknown key or bad value."""


class _Unset:
    """Default of every file-configurable flag, so a flag given explicitly is told apart."""

    def __repr__(self) -> str:
        return "<from config file or default>"


UNSET = _Unset()


def parse_config(data: object, source: str) -> dict[str, object]:
    """argparse dest -> checked value, from the YAML document ``data`` read from ``source``."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of flag names to values, got {type(data).__name__}")
    values: dict[str, object] = {}
    for key, value in data.items():
        flag = FILE_KEYS.get(key)
        if flag is None or flag.load is None:
            raise ConfigError(f"{source}: unknown key {key!r}; known keys: {', '.join(FILE_KEYS)}")
        try:
            values[flag.dest] = flag.load(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as err:
            shown = "" if repr(value) in str(err) else f", got {value!r}"  # the checks of flags name it already
            raise ConfigError(f"{source}: key {key!r}: {err}{shown}") from None
    return values


#: A config file is a few dozen lines; anything far larger is not one (and is not read into memory).
CONFIG_LIMIT = 64 * 1024


def load_config(path: Path) -> dict[str, object]:
    """The checked values of config file ``path``, read through the bounded reader and the safe YAML loader."""
    from deviceplugin.cli.safeyaml import YamlProblem, load_yaml
    from deviceplugin.host.files import FileProblem, read_file, shown

    try:
        raw = read_file(path, CONFIG_LIMIT, what="config file ")
    except FileProblem as err:
        raise ConfigError(str(err)) from None
    if raw is None:
        raise ConfigError(f"cannot read config file {shown(path)}: No such file or directory")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{shown(path)}: not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start}); "
                          "save it as UTF-8") from None
    try:
        data = load_yaml(text, shown(path))
    except YamlProblem as err:
        raise ConfigError(str(err)) from None
    return parse_config(data, shown(path))


def defer_defaults(parser: argparse.ArgumentParser, flags: Iterable[Flag]) -> None:
    """Make the file keys' defaults :data:`UNSET`, keeping the real ones for :func:`apply_config`."""
    dests = [flag.dest for flag in flags if flag.load is not None]
    defaults = {dest: parser.get_default(dest) for dest in dests}
    parser.set_defaults(**{dest: UNSET for dest in dests}, _flag_defaults=defaults)


def apply_config(args: argparse.Namespace, file_values: Mapping[str, object]) -> argparse.Namespace:
    """Fill every flag not given explicitly from the file, else from its default (in place)."""
    for dest, default in args._flag_defaults.items():
        if getattr(args, dest) is UNSET:
            setattr(args, dest, file_values.get(dest, default))
    return args
