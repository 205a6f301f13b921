"""YAML for config files, parsed so no document can explode, hang or be read two ways.

PyYAML's ``safe_load`` follows YAML 1.1: aliases nest without limit (a
"billion laughs" document of a few hundred bytes becomes 10^8 nodes), the
composer recurses once per nesting level (50,000 levels: RecursionError),
``1:50`` is 110, ``010`` is 8, ``+1``, ``1_000`` and ``0x10`` are numbers and
``yes`` is true. Here, before anything is built, the event stream is
checked: no aliases or anchors, no tags but ``!!str``/``!!map``/``!!seq``, at
most :data:`MAX_DEPTH` levels and :data:`MAX_NODES` nodes; duplicate keys are
refused. Scalars resolve by YAML 1.2's core schema, narrowed to what a config
needs: ``null``, ``true``/``false`` and whole numbers in plain ASCII decimal
with no sign but ``-``, no leading zero and at most 19 digits. Everything
else is a string, which each key's converter then accepts or refuses in
one line. Errors (PyYAML's span two or more lines) become one line.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    Event,
    NodeEvent,
    ScalarEvent,
)
from yaml.nodes import MappingNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from deviceplugin.errors import CmkError

MAX_DEPTH = 16  # a config is a mapping of scalars and short lists: 2 levels
MAX_NODES = 10_000
_ALLOWED_TAGS = frozenset({"tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


class YamlProblem(CmkError):
    """A document this loader refuses; the message is one line naming the source."""


class _Resolver(BaseResolver):
    """YAML 1.2 core schema, narrowed: null, true/false, plain decimal integers; the rest are strings."""


_Resolver.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"(?:~|null|Null|NULL|)\Z"),
                                ["~", "n", "N", ""])
_Resolver.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z"),
                                list("tTfF"))
_Resolver.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"-?(?:0|[1-9][0-9]{0,18})\Z"),
                                list("-0123456789"))


class _Constructor(SafeConstructor):
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a key that is a list or mapping",
                                                        key_node.start_mark) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Constructor.yaml_constructors = {tag: build for tag, build in SafeConstructor.yaml_constructors.items()
                                  if tag in _ALLOWED_TAGS | {"tag:yaml.org,2002:null", "tag:yaml.org,2002:bool",
                                                             "tag:yaml.org,2002:int"}}


class _Loader(Reader, Scanner, Parser, Composer, _Constructor, _Resolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


def _refused(problem: str, event: Event) -> yaml.MarkedYAMLError:
    mark: Any = event.start_mark  # the stubs type it as either loader's Mark
    return yaml.MarkedYAMLError(problem=problem, problem_mark=mark)


def _check_events(loader: _Loader) -> None:
    """Refuse aliases, anchors, tags, depth and size before the (recursive) composer sees the document."""
    depth = nodes = 0
    while loader.check_event():
        event = loader.get_event()
        if isinstance(event, AliasEvent):
            raise _refused("aliases (*name) are not allowed; write the value out", event)
        if isinstance(event, NodeEvent):
            nodes += 1
            if event.anchor is not None:
                raise _refused("anchors (&name) are not allowed; write the value out", event)
            tag = getattr(event, "tag", None)
            implicit = event.implicit[0] if isinstance(event, ScalarEvent) else getattr(event, "implicit", True)
            if tag is not None and not implicit and tag not in _ALLOWED_TAGS:
                raise _refused(f"tag {tag!r} is not allowed (write plain values)", event)
            if nodes > MAX_NODES:
                raise _refused(f"more than {MAX_NODES} values", event)
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _refused(f"nested deeper than {MAX_DEPTH} levels", event)
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


def load_yaml(text: str, source: str) -> object:
    """The one document in ``text`` (None when empty); YamlProblem, one line naming ``source``, otherwise."""
    try:
        checker = _Loader(text)
        try:
            _check_events(checker)
        finally:
            checker.dispose()
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        context = f" ({err.context})" if err.context else ""
        raise YamlProblem(f"{source}:{where} not valid YAML: {err.problem}{context}") from None
    except yaml.YAMLError as err:
        raise YamlProblem(f"{source}: not valid YAML: {' '.join(str(err).split())}") from None
