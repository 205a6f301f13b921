"""``--config FILE``: the daemon's flags as a YAML mapping, so a ConfigMap can carry them.

Keys are the long flag names without dashes in front (``num-exclusive-cores: 4``);
a flag given on the command line wins over the file, the file over the
flag's default. Values go through the same checks as the flags, and an
unknown key or a wrong type is a one-line error naming the key.

One file may serve many node groups: a ``default:`` mapping of such keys and
a ``nodes:`` list whose entries select nodes by name (``names:`` exact names
or shell globs, or ``nameRegex:``) and carry a ``config:`` mapping laid over
the default key by key; the first entry that matches wins. The node name
comes from ``--node-name`` or the ``NODE_NAME`` environment variable (the
DaemonSet sets it from ``spec.nodeName``), so the daemon needs no API access.
A file without ``default:``/``nodes:`` is one flat section (``default``).
Why: ``docs/user/node-groups.md``.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from deviceplugin.cli.flags import FILE_KEYS, Flag, flag_named
from deviceplugin.errors import CmkError
from deviceplugin.model.settings import setting_name


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


#: The keys of a file with per-node sections, and of each entry of its ``nodes:`` list.
SECTION_KEYS = ("default", "nodes")
ENTRY_KEYS = ("names", "nameRegex", "config")
#: The section a flat file is, and a sectioned file's when no entry matches.
DEFAULT_SECTION = "default"
#: Where the node name comes from when ``--node-name`` is not given (the DaemonSet's downward API).
NODE_NAME_ENV = "NODE_NAME"


@dataclass(frozen=True)
class ActiveConfig:
    """What one node takes from a config file: the checked values, which section, and its generation."""

    values: dict[str, object]
    #: ``default``, or ``nodes[I]``: the first entry of the ``nodes:`` list that matched the node
    section: str
    #: A hash of the keys and values this node takes: equal on every node of a group, changed by any edit of them
    generation: str
    node: str | None


def generation_of(data: Mapping[str, object]) -> str:
    """12 hex digits of the SHA-256 of the section's keys and values (sorted, as JSON): stable across key order."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _entry_matches(entry: Mapping[str, object], node: str, where: str) -> bool:
    names, regex = entry.get("names"), entry.get("nameRegex")
    if (names is None) == (regex is None):
        raise ConfigError(f"{where}: give exactly one of names: (a list of node names or globs) or nameRegex:")
    if names is not None:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{where}: names: expected a list of node names or shell globs (e.g. [node-1, 'big-*'])")
        return any(fnmatch.fnmatchcase(node, pattern) for pattern in names)
    if not isinstance(regex, str) or not regex:
        raise ConfigError(f"{where}: nameRegex: expected a regular expression as a string")
    try:
        return re.fullmatch(regex, node) is not None
    except re.error as err:
        raise ConfigError(f"{where}: nameRegex {regex!r}: {err}") from None


def _mapping(value: object, where: str) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping of flag names to values, got {type(value).__name__}")
    return value


def select_section(data: object, node: str | None, source: str) -> tuple[dict[str, object], str]:
    """The raw keys node ``node`` takes from document ``data``, and the section's name. Pure.

    Every entry is checked, matching or not, so a typo in another group's
    section fails on every node, not only once that group rolls out.
    """
    if not isinstance(data, dict) or not any(key in data for key in SECTION_KEYS):
        return _mapping(data, source), DEFAULT_SECTION
    extra = [key for key in data if key not in SECTION_KEYS]
    if extra:
        raise ConfigError(f"{source}: key {extra[0]!r} beside default:/nodes:; put flag keys under default: "
                          "or under an entry's config:")
    default = _mapping(data.get("default"), f"{source}: default")
    parse_config(default, f"{source}: default")
    entries = data.get("nodes") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: nodes: expected a list of {{names: [...] or nameRegex: ..., config: {{...}}}}")
    chosen: tuple[dict[str, object], str] | None = None
    for index, entry in enumerate(entries):
        where = f"{source}: nodes[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with names: or nameRegex: and config:")
        unknown = [key for key in entry if key not in ENTRY_KEYS]
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(ENTRY_KEYS)}")
        overrides = _mapping(entry.get("config"), f"{where}: config")
        parse_config(overrides, f"{where}: config")
        matched = _entry_matches(entry, node or "", where) and node is not None  # a selector is checked anyway
        if matched and chosen is None:
            chosen = ({**default, **overrides}, f"nodes[{index}]")
    if entries and node is None:
        raise ConfigError(f"{source} has per-node sections but the node name is unknown: set {NODE_NAME_ENV} "
                          "(the DaemonSet sets it from spec.nodeName) or give --node-name")
    return chosen or (default, DEFAULT_SECTION)


def node_name(given: str | None) -> str | None:
    """``--node-name``, else ``$NODE_NAME``, else unknown (never the hostname: in a pod it is the pod's)."""
    return given or os.environ.get(NODE_NAME_ENV) or None


#: A config file is a few dozen lines; anything far larger is not one (and is not read into memory).
CONFIG_LIMIT = 64 * 1024


def load_config(path: Path, node: str | None = None) -> dict[str, object]:
    """The checked values node ``node`` takes from config file ``path`` (see :func:`read_config`)."""
    return read_config(path, node).values


def read_config(path: Path, node: str | None = None) -> ActiveConfig:
    """Config file ``path`` for node ``node``, read through the bounded reader and the safe YAML loader."""
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
    raw_values, section = select_section(data, node, shown(path))
    return ActiveConfig(parse_config(raw_values, shown(path)), section, generation_of(raw_values), node)


def apply_config_file(args: argparse.Namespace) -> ActiveConfig | None:
    """Fill ``args`` from its ``--config`` file (the section of ``--node-name``/``$NODE_NAME``), else defaults."""
    active = read_config(args.config, node_name(args.node_name)) if args.config else None
    apply_config(args, active.values if active else {})
    return active


def defer_defaults(parser: argparse.ArgumentParser, flags: Iterable[Flag]) -> None:
    """Make the file keys' defaults :data:`UNSET`, keeping the real ones for :func:`apply_config`."""
    dests = [flag.dest for flag in flags if flag.load is not None]
    defaults = {dest: parser.get_default(dest) for dest in dests}
    parser.set_defaults(**{dest: UNSET for dest in dests}, _flag_defaults=defaults)


def apply_config(args: argparse.Namespace, file_values: Mapping[str, object]) -> argparse.Namespace:
    """Fill every flag not given explicitly from the file, else from its default (in place)."""
    from_file: set[str] = set()
    for dest, default in args._flag_defaults.items():
        if getattr(args, dest) is UNSET:
            setattr(args, dest, file_values.get(dest, default))
            if dest in file_values:
                from_file.add(dest)
    args._from_file = getattr(args, "_from_file", frozenset()) | from_file
    return args


def setting_said(args: argparse.Namespace) -> Callable[[str], str]:
    """How an error names a setting (:meth:`CmkError.named`): as the user gave it, a file's key or a flag."""
    from_file: frozenset[str] = getattr(args, "_from_file", frozenset())

    def said(dest: str) -> str:
        return f"{args.config}: key {setting_name(dest)!r}" if dest in from_file else flag_named(dest)

    return said


def at_edge(err: CmkError, args: argparse.Namespace) -> CmkError:
    """``err`` with the settings it names said as the user gave them (itself when it names none)."""
    return CmkError(err.named(setting_said(args)), exit_code=err.exit_code) if err.settings else err
