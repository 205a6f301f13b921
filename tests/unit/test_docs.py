"""Docs the code points at exist, and module docstrings stay short (the essays live in docs/)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("deviceplugin/**/*.py"), *ROOT.glob("pinner/**/*.py"), *ROOT.glob("tests/**/*.py")])

MAX_LINES = 15  # the essays were 20 to 49


def test_every_docs_path_the_code_readme_and_docs_name_exists():
    named = set()
    for path in [*SOURCES, ROOT / "README.md", *ROOT.glob("docs/**/*.md")]:
        named |= set(re.findall(r"\bdocs/[\w./-]+\.md", path.read_text()))
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert named and not missing, f"named but not in the repository: {missing}"


def test_module_docstrings_say_why_in_a_few_lines():
    long = {}
    for path in SOURCES:
        name = str(path.relative_to(ROOT))
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if doc.count("\n") + 1 > MAX_LINES:
            long[name] = doc.count("\n") + 1
    assert long == {}, "move the essay to docs/ and point there"
