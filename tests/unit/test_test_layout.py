"""The tests are housed like code: helpers shared across modules live in tests/support, never in a test module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports from ``tests`` (absolute imports; the suite uses no relative ones)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "tests" or name.startswith("tests.")}


def test_no_test_module_imports_another_test_module() -> None:
    offenders = {f"{path.relative_to(ROOT)} -> {name}" for path in (ROOT / "tests").rglob("*.py")
                 for name in imported(path) if name.rpartition(".")[2].startswith("test_")}
    assert not offenders, sorted(offenders)


#: The cluster tier's bring-up (node, images, deployment): heavy (the real components, the machine-wide
#: lock), so it stays with its tier rather than beside the light helpers every tier imports; the cluster
#: benchmark runs on the same node.
#: The real parts' bring-up benchmarks may run beside a tier: the cluster's node, and the systemd tier's VM with
#: its guest program (``benchmarks/systemd_hook.py`` boots it with a guest of its own); the cluster's switch to
#: DRA mode and its peers' binaries (``benchmarks/dra_side_by_side.py``).
CLUSTER_BRING_UP = {"tests.cluster.node", "tests.cluster.images", "tests.cluster.deploy", "tests.cluster.dra",
                    "tests.systemd.vm", "tests.systemd.guest"}


def test_benchmarks_import_only_tests_support_and_the_cluster_bring_up() -> None:
    offenders = {f"{path.relative_to(ROOT)} -> {name}" for path in (ROOT / "benchmarks").rglob("*.py")
                 for name in imported(path) if not name.startswith("tests.support") and name not in CLUSTER_BRING_UP}
    assert not offenders, sorted(offenders)


def test_the_cluster_bring_up_is_no_test_module_and_no_conftest() -> None:
    assert all((ROOT / (name.replace(".", "/") + ".py")).is_file() for name in CLUSTER_BRING_UP)
    assert not [name for name in CLUSTER_BRING_UP if name.rpartition(".")[2].startswith(("test_", "conftest"))]


def test_each_test_carries_the_marker_of_its_tier(request, pytestconfig) -> None:
    """The root conftest marks by directory: this test, in tests/unit, is marked ``unit`` and nothing else."""
    from tests.conftest import TIERS

    assert [m.name for m in request.node.iter_markers() if m.name in TIERS.values()] == ["unit"]

    assert set(TIERS) == {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists()
                          and p.name != "support"}
    markers = pytestconfig.getini("markers")
    assert {tier for tier in TIERS.values()} <= {line.partition(":")[0] for line in markers}
