"""Docs and files the code points at exist, and module docstrings (a C file's opening comment) stay short."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("deviceplugin/**/*.py"), *ROOT.glob("pinner/**/*.py"), *ROOT.glob("tests/**/*.py")])
C_SOURCES = sorted([*ROOT.glob("pinner/native/*.[ch]"), *ROOT.glob("tests/**/*.c")])
#: a path into this repository, as C comments point at the Python side, the docs and the tests
REPO_PATH = re.compile(r"\b(?:deviceplugin|pinner|tests|docs)/[\w./-]*\w\.(?:py|md|c|h)\b")

MAX_LINES = 15  # the essays were 20 to 49


def test_every_docs_path_the_code_readme_and_docs_name_exists():
    named = set()
    for path in [*SOURCES, *C_SOURCES, ROOT / "README.md", *ROOT.glob("docs/**/*.md")]:
        named |= set(re.findall(r"\bdocs/[\w./-]+\.md", path.read_text()))
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert named and not missing, f"named but not in the repository: {missing}"


def test_every_file_a_c_comment_names_exists():
    named = {(str(path.relative_to(ROOT)), name) for path in C_SOURCES for name in REPO_PATH.findall(path.read_text())}
    missing = sorted((where, name) for where, name in named if not (ROOT / name).is_file())
    assert named and not missing, f"C comments name files that are not in the repository: {missing}"


def opening_comment(text: str) -> str:
    """A C file's first /* ... */ comment, which says what the unit is for."""
    match = re.match(r"\s*/\*(.*?)\*/", text, re.DOTALL)
    return match.group(1).strip() if match else ""


def test_module_docstrings_say_why_in_a_few_lines():
    long = {}
    for path in [*SOURCES, *C_SOURCES]:
        name = str(path.relative_to(ROOT))
        text = path.read_text()
        doc = opening_comment(text) if path.suffix in (".c", ".h") else ast.get_docstring(ast.parse(text)) or ""
        if doc.count("\n") + 1 > MAX_LINES:
            long[name] = doc.count("\n") + 1
        if not doc and path.suffix in (".c", ".h"):
            long[name] = 0  # a unit says what it is for
    assert long == {}, "move the essay to docs/ and point there; say in a line or two what each file is for"
