"""``--config FILE``: the daemon's flags as a YAML mapping, so a ConfigMap can carry them.

Keys are the long flag names without dashes in front (``num-exclusive-cores: 4``);
a flag given on the command line wins over the file, the file over the
flag's default. Values go through the same checks as the flags, and an
unknown key or a wrong type is a one-line error naming the key.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from deviceplugin.cli.flags import _count, _cpus, _slots, host_dir, parse_address
from deviceplugin.errors import CmkError
from deviceplugin.model.plan import Mode


class ConfigError(CmkError):
    """The config file is unreadable, not a mapping, or holds an unknown key or bad value."""


class _Unset:
    """Default of every file-configurable flag, so a flag given explicitly is told apart."""

    def __repr__(self) -> str:
        return "<from config file or default>"


UNSET = _Unset()


def _whole(check: Callable[[str], int]) -> Callable[[object], int]:
    """A count: a YAML integer (the loader resolves only plain ASCII decimals), through the flag's check."""
    def convert(value: object) -> int:
        if type(value) is not int:
            raise TypeError("expected a whole number")
        return check(str(value))

    return convert


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("expected a non-empty string")
    if not value.isprintable():
        raise ValueError(f"must not hold control characters (newline, NUL...), got {value[:80]!r}")
    return value


def _mode(value: object) -> Mode:
    text = _text(value)
    if text not in list(Mode):
        raise ValueError(f"expected one of {', '.join(Mode)}, got {text!r}")
    return Mode(text)


def _cpu_set(value: object) -> frozenset[int]:
    if isinstance(value, list) and all(type(item) is int for item in value):
        value = ",".join(str(item) for item in value)
    elif type(value) is int:
        value = str(value)
    return _cpus(_text(value))


def _flag(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError("expected true or false")
    return value


def _path(value: object) -> Path:
    return Path(_text(value))


#: file key -> (argparse dest, converter raising TypeError/ValueError/ArgumentTypeError)
KEYS: Mapping[str, tuple[str, Callable[[object], object]]] = {
    "num-exclusive-cores": ("num_exclusive_cores", _whole(_count)),
    "num-shared-cores": ("num_shared_cores", _whole(_count)),
    "exclusive-mode": ("exclusive_mode", _mode),
    "shared-mode": ("shared_mode", _mode),
    "excl-non-isolcpus": ("excl_non_isolcpus", _cpu_set),
    "shared-slots": ("shared_slots", _whole(_slots)),
    "infra-slots": ("infra_slots", _whole(_slots)),
    "install-dir": ("install_dir", lambda value: host_dir(_text(value))),
    "kubelet-dir": ("kubelet_dir", _path),
    "sysfs-root": ("sysfs_root", _path),
    "procfs-root": ("procfs_root", _path),
    "cdi": ("cdi", _flag),
    "cdi-dir": ("cdi_dir", _path),
    "metrics-address": ("metrics_address", lambda value: parse_address(_text(value))),
    "pod-resources-socket": ("pod_resources_socket", _path),
    "nfd": ("nfd", _flag),
    "nfd-features-dir": ("nfd_features_dir", _path),
}


def parse_config(data: object, source: str) -> dict[str, object]:
    """argparse dest -> checked value, from the YAML document ``data`` read from ``source``."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of flag names to values, got {type(data).__name__}")
    values: dict[str, object] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise ConfigError(f"{source}: unknown key {key!r}; known keys: {', '.join(KEYS)}")
        dest, convert = KEYS[key]
        try:
            values[dest] = convert(value)
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


def defer_defaults(parser: argparse.ArgumentParser, dests: Iterable[str]) -> None:
    """Make the flags' defaults :data:`UNSET`, keeping the real ones for :func:`apply_config`."""
    dests = list(dests)
    defaults = {dest: parser.get_default(dest) for dest in dests}
    parser.set_defaults(**{dest: UNSET for dest in dests}, _flag_defaults=defaults)


def apply_config(args: argparse.Namespace, file_values: Mapping[str, object]) -> argparse.Namespace:
    """Fill every flag not given explicitly from the file, else from its default (in place)."""
    for dest, default in args._flag_defaults.items():
        if getattr(args, dest) is UNSET:
            setattr(args, dest, file_values.get(dest, default))
    return args
