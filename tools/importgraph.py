"""Measure the import graph of the project's packages: modules, arrows, layers, fan-out, who loads grpc.

Reads the sources with :mod:`ast` (nothing is imported), so it works on a tree
that does not install. Every import counts, also those inside functions: a
lazy import is still a dependency. ``python tools/importgraph.py`` prints a
summary; ``--edges`` adds every arrow.
"""
from __future__ import annotations

import argparse
import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("deviceplugin", "pinner", "api")
COMPOSITION_ROOTS = ("deviceplugin.daemon", "deviceplugin.cli", "deviceplugin.cli.main")


def module_name(path: Path) -> str:
    """Dotted name of a source file under :data:`ROOT` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of :data:`PACKAGES`, by dotted name (generated protobuf stubs included)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ".venv" not in path.parts:
                found[module_name(path)] = path
    return found


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name a module imports (``from a import b`` gives ``a`` and ``a.b``)."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The project module a dotted name lands in (longest known prefix), or None for outside modules."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Arrows between project modules, and each module's direct outside top-level imports."""
    known = modules()
    internal: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for name, path in known.items():
        names = imported_names(name, path)
        internal[name] = {m for t in names if (m := resolve(t, known)) and m != name}
        external[name] = {t.split(".")[0] for t in names if not resolve(t, known) and t}
    return internal, external


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="also print every arrow")
    args = parser.parse_args()
    internal, external = graph()

    @functools.cache
    def depth(module: str) -> int:
        """Floor of a module: 0 imports no project module, else one above its highest import."""
        return 1 + max((depth(m) for m in internal[module]), default=-1)

    def parents(module: str) -> list[str]:
        """The packages Python imports on the way to a module (their ``__init__`` runs too)."""
        parts = module.split(".")
        return [".".join(parts[:end]) for end in range(1, len(parts)) if ".".join(parts[:end]) in internal]

    @functools.cache
    def closure(module: str) -> frozenset[str]:
        """Every project module that importing ``module`` loads."""
        reached: set[str] = set()
        todo = [module]
        while todo:
            current = todo.pop()
            for m in internal[current] | set(parents(current)):
                if m not in reached and m != module:
                    reached.add(m)
                    todo.append(m)
        return frozenset(reached)

    def loads(module: str, outside: str) -> bool:
        return outside in external[module] or any(outside in external[m] for m in closure(module))

    arrows = sum(len(v) for v in internal.values())
    floors: dict[int, list[str]] = {}
    for module in internal:
        floors.setdefault(depth(module), []).append(module)
    for package in PACKAGES:
        members = [m for m in internal if m == package or m.startswith(package + ".")]
        inner = sum(1 for m in members for t in internal[m] if t == package or t.startswith(package + "."))
        print(f"{package}: {len(members)} modules, {inner} arrows inside")
    print(f"all: {len(internal)} modules, {arrows} import arrows, {len(floors)} floors (longest path {max(floors)})")
    for floor in sorted(floors):
        print(f"  floor {floor}: {len(floors[floor])} modules")
    for root in COMPOSITION_ROOTS:
        if root in internal:
            print(f"fan-out of {root}: {len(internal[root])} direct, {len(closure(root))} transitive")
    grpc = sorted(m for m in internal if m.startswith("deviceplugin") and loads(m, "grpc"))
    print(f"deviceplugin modules that load grpc (transitively): {len(grpc)}")
    for module in grpc:
        print(f"  {module}")
    print("deviceplugin modules free of grpc, watchdog, prometheus_client, socket:")
    heavy = ("grpc", "watchdog", "prometheus_client", "socket")
    pure = sorted(m for m in internal if m.startswith("deviceplugin") and not any(loads(m, h) for h in heavy))
    print(f"  {len(pure)}: {' '.join(pure)}")
    if args.edges:
        for module in sorted(internal):
            for target in sorted(internal[module]):
                print(f"{module} -> {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
