"""``tools/importgraph.py``, the import graph the closing notes quote: on a small tree and on this one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def importgraph() -> ModuleType:
    spec = importlib.util.spec_from_file_location("importgraph", ROOT / "tools" / "importgraph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["importgraph"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_submodule_imported_from_its_package_is_an_arrow_to_the_submodule_only(tmp_path: Path) -> None:
    """The package's __init__ importing the module back is no cycle (it was: the tool recursed forever)."""
    write(tmp_path, {
        "deviceplugin/__init__.py": "",
        "deviceplugin/standin/__init__.py": "from deviceplugin.standin.standin import Kubelet\n",
        "deviceplugin/standin/lifecycle.py": "VERSIONS = ()\n",
        "deviceplugin/standin/standin.py": "from deviceplugin.standin import lifecycle\nKubelet = object\n",
        "deviceplugin/view.py": "from deviceplugin.standin import Kubelet\n",
    })
    graph = importgraph().Graph(tmp_path, eager=False)
    assert graph.internal["deviceplugin.standin.standin"] == {"deviceplugin.standin.lifecycle"}
    assert graph.internal["deviceplugin.view"] == {"deviceplugin.standin"}  # a name, not a module: the package
    assert graph.depth("deviceplugin.view") == 3
    assert graph.closure("deviceplugin.standin.standin") == {"deviceplugin", "deviceplugin.standin",
                                                              "deviceplugin.standin.lifecycle"}


def test_a_circle_is_reported_with_its_modules_not_recursed_into(tmp_path: Path) -> None:
    """Before: depth() recursed round the circle until RecursionError (a lazy import made one)."""
    write(tmp_path, {
        "deviceplugin/__init__.py": "",
        "deviceplugin/a.py": "from deviceplugin import b\n",
        "deviceplugin/b.py": "def f():\n    from deviceplugin import a\n",
        "deviceplugin/c.py": "from deviceplugin import a\n",
    })
    graph = importgraph().Graph(tmp_path, eager=False)
    assert graph.circles() == [["deviceplugin.a", "deviceplugin.b"]]
    lines = importgraph().summary(tmp_path)
    assert any(line.endswith("circles: 1") for line in lines)
    assert "  circle: deviceplugin.a deviceplugin.b" in lines


def test_the_summary_of_this_tree_names_every_package_and_the_composition_roots() -> None:
    lines = importgraph().summary(ROOT)
    assert [line.split(":")[0] for line in lines[:3]] == ["deviceplugin", "pinner", "api"]
    assert any(line.startswith("fan-out of deviceplugin.daemon:") for line in lines)
    assert any(line.startswith("fan-out of deviceplugin.cli.commands:") for line in lines)
    assert any(line.endswith("circles: 0") for line in lines)  # this tree has none
    assert any(line.startswith("biggest deviceplugin modules (lines): ") for line in lines)
