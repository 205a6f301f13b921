"""Measure the import graph of the project's packages: modules, arrows, floors, circles, rooms, who loads grpc.

Reads the sources with :mod:`ast` (nothing is imported), so it also reads a
tree that does not install (``--root``, e.g. another worktree). Every import
is an arrow, also one inside a function (a lazy import is still a dependency)
and a string naming a project module (the subcommand table's
``importlib.import_module``). Separately, *eager* arrows are the module-level
imports: what importing a module really loads before any function runs.
``--edges`` also prints every arrow.
"""
from __future__ import annotations

import argparse
import ast
import functools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("deviceplugin", "pinner", "api")
#: The daemon and the subcommand table, before and after the restructuring.
COMPOSITION_ROOTS = ("deviceplugin.daemon", "deviceplugin.daemon.supervisor", "deviceplugin.commands",
                     "deviceplugin.cli.commands")
HEAVY = ("grpc", "watchdog", "prometheus_client", "socket")


def modules(root: Path) -> dict[str, Path]:
    """Every module of :data:`PACKAGES` by dotted name (a package's ``__init__`` is the package)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


@dataclass
class Imports:
    """Dotted names one module imports: all of them, and those at module level (eager)."""

    all: set[str]
    eager: set[str]


def _names(node: ast.AST, name: str, is_package: bool, known: dict[str, Path]) -> set[str]:
    """Dotted names one AST node imports (``from a import b``: ``a.b`` if that is a module, else ``a``).

    A submodule imported from its package is an arrow to the submodule only:
    the package's ``__init__`` runs on the way (``Graph._parents``), and an
    arrow to it would be a false cycle when the ``__init__`` imports it back.
    """
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        prefix = node.module or ""
        if node.level:
            base = name.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        submodules = {f"{prefix}.{alias.name}" for alias in node.names} & known.keys()
        return submodules | ({prefix} if len(submodules) < len(node.names) else set())
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
        return {node.value}
    return set()


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Imports:
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    found = Imports(set(), set())
    for node in ast.walk(tree):
        found.all |= _names(node, name, is_package, known)

    def eager(body: list[ast.stmt]) -> None:
        """Module-level statements, into ``try``/``if`` blocks, not into functions or ``if TYPE_CHECKING``."""
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.eager |= _names(stmt, name, is_package, known)
            elif isinstance(stmt, ast.If) and "TYPE_CHECKING" not in ast.unparse(stmt.test):
                eager(stmt.body + stmt.orelse)
            elif isinstance(stmt, ast.Try):
                eager(stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse + stmt.finalbody)

    eager(tree.body)
    return found


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The project module a dotted name lands in (longest known prefix), or None for an outside module."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        if (candidate := ".".join(parts[:end])) in known:
            return candidate
    return None


class Graph:
    """Arrows between project modules and each module's outside imports, all or eager only."""

    def __init__(self, root: Path, *, eager: bool) -> None:
        known = modules(root)
        self.internal: dict[str, set[str]] = {}
        self.external: dict[str, set[str]] = {}
        for name, path in known.items():
            found = imports_of(name, path, known)
            names = found.eager if eager else found.all
            self.internal[name] = {m for t in names if (m := resolve(t, known)) and m != name}
            self.external[name] = {t.split(".")[0] for t in names if t and not resolve(t, known)}
        self.closure = functools.cache(self._closure)
        self.depth = functools.cache(self._depth)

    def _parents(self, module: str) -> set[str]:
        """The packages Python imports on the way to a module (their ``__init__`` runs too)."""
        parts = module.split(".")
        return {p for end in range(1, len(parts)) if (p := ".".join(parts[:end])) in self.internal}

    def _closure(self, module: str) -> frozenset[str]:
        """Every project module that importing ``module`` reaches."""
        reached: set[str] = set()
        todo = [module]
        while todo:
            current = todo.pop()
            for m in self.internal[current] | self._parents(current):
                if m not in reached and m != module:
                    reached.add(m)
                    todo.append(m)
        return frozenset(reached)

    def _depth(self, module: str) -> int:
        """Floor of a module: 0 imports no project module, else one above its highest import."""
        return 1 + max((self.depth(m) for m in self.internal[module]), default=-1)

    def circles(self) -> list[list[str]]:
        """Sets of modules that import each other round (Tarjan's components of more than one), largest first."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        found: list[list[str]] = []
        for start in sorted(self.internal):
            if start in index:
                continue
            work = [(start, iter(sorted(self.internal[start])))]
            index[start] = low[start] = len(index)
            stack.append(start)
            while work:
                node, targets = work[-1]
                target = next(targets, None)
                if target is None:
                    work.pop()
                    if work:
                        low[work[-1][0]] = min(low[work[-1][0]], low[node])
                    if low[node] == index[node]:
                        component = []
                        while True:
                            member = stack.pop()
                            component.append(member)
                            if member == node:
                                break
                        if len(component) > 1:
                            found.append(sorted(component))
                elif target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(self.internal[target]))))
                elif target in stack:
                    low[node] = min(low[node], index[target])
        return sorted(found, key=len, reverse=True)

    def loads(self, module: str, outside: str) -> bool:
        return any(outside in self.external[m] for m in self.closure(module) | {module})


#: How many of the biggest modules the summary names, and from how many lines a function is long.
ROOMS = 6
LONG_FUNCTION = 60


def _path(root: Path, module: str) -> Path:
    return modules(root)[module]


def _lines(root: Path, module: str) -> int:
    return len(_path(root, module).read_text().splitlines())


def _function_lengths(root: Path, module: str) -> list[int]:
    tree = ast.parse(_path(root, module).read_text())
    return [node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None]


def summary(root: Path) -> list[str]:
    lazy, eager = Graph(root, eager=False), Graph(root, eager=True)
    internal = lazy.internal
    lines = []
    for package in PACKAGES:
        members = [m for m in internal if m == package or m.startswith(package + ".")]
        inside = sum(1 for m in members for t in internal[m] if t.split(".")[0] == package)
        lines.append(f"{package}: {len(members)} modules, {inside} arrows inside")
    arrows = (f"all: {len(internal)} modules, {sum(len(v) for v in internal.values())} import arrows "
              f"({sum(len(v) for v in eager.internal.values())} eager)")
    circles = lazy.circles()
    if circles:  # floors are undefined on a circle: say where it is instead of recursing forever
        lines.append(f"{arrows}, circles: {len(circles)}")
        lines.extend(f"  circle: {' '.join(circle)}" for circle in circles)
    else:
        floors: dict[int, int] = {}
        for module in internal:
            floors[lazy.depth(module)] = floors.get(lazy.depth(module), 0) + 1
        lines.append(f"{arrows}, {len(floors)} floors (longest path {max(floors)}), circles: 0")
        lines.append("  modules per floor: " + " ".join(f"{f}:{n}" for f, n in sorted(floors.items())))
    packages = sorted({m.rsplit(".", 1)[0] for m in internal if m.startswith("deviceplugin.")})
    lines.append(f"deviceplugin folders: {len(packages)} ({' '.join(packages)})")
    for root_module in COMPOSITION_ROOTS:
        if root_module in internal:
            lines.append(f"fan-out of {root_module}: {len(internal[root_module])} direct, "
                         f"{len(lazy.closure(root_module))} transitive")
    ours = [m for m in internal if m.startswith("deviceplugin")]
    lines.append("biggest deviceplugin modules (lines): " + " ".join(
        f"{m}:{n}" for m, n in sorted(((m, _lines(root, m)) for m in ours), key=lambda item: -item[1])[:ROOMS]))
    lengths = [length for m in ours for length in _function_lengths(root, m)]
    lines.append(f"deviceplugin functions over {LONG_FUNCTION} lines: {sum(1 for n in lengths if n > LONG_FUNCTION)} "
                 f"of {len(lengths)}")
    reach = sorted(m for m in ours if lazy.loads(m, "grpc"))
    load = sorted(m for m in ours if eager.loads(m, "grpc"))
    lines.append(f"deviceplugin modules that can reach grpc (any import): {len(reach)} of {len(ours)}")
    lines.append(f"deviceplugin modules whose import loads grpc (eager): {len(load)}: {' '.join(load)}")
    pure = sorted(m for m in ours if not any(lazy.loads(m, h) for h in HEAVY))
    lines.append(f"deviceplugin modules that reach none of {', '.join(HEAVY)}: {len(pure)}: {' '.join(pure)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree to read (default: this one)")
    parser.add_argument("--edges", action="store_true", help="also print every arrow")
    args = parser.parse_args()
    print("\n".join(summary(args.root)))
    if args.edges:
        internal = Graph(args.root, eager=False).internal
        print("\n".join(f"{m} -> {t}" for m in sorted(internal) for t in sorted(internal[m])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
