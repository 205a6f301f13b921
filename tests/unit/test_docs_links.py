"""Every relative link in README.md and docs/ lands on a file (and heading), and docs/README.md reaches every doc.

The README was cut into docs/user, docs/dev and docs/design; a link that no longer resolves is a
page a reader cannot find, so these fail on the first broken one.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[(?:[^\]\n]|\n(?!\n))*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text with fenced blocks removed, so code that looks like a link is not read as one."""
    return FENCE.sub("", text)


def links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans (a code span inside a link's text is dropped, the link kept)."""
    return [m.group(1) for m in LINK.finditer(CODE.sub("", prose(text)))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the page's headings make, with GitHub's -1, -2 suffixes for repeats."""
    seen: Counter[str] = Counter()
    out = set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = slug(heading)
        out.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)


def resolve(page: Path, target: str) -> tuple[Path, str]:
    """The file a link names (the page itself for a bare #anchor) and its anchor."""
    path, _, anchor = target.partition("#")
    return ((page.parent / path).resolve() if path else page), anchor


def test_slugs_follow_github() -> None:
    assert slug("Deploy: from a bare node to a pinned pod") == "deploy-from-a-bare-node-to-a-pinned-pod"
    assert slug("First thing to run: `cmk describe`") == "first-thing-to-run-cmk-describe"
    assert slug("Requests checked at the API server (`deploy/admission`)") == \
        "requests-checked-at-the-api-server-deployadmission"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in filter(relative, links(page.read_text())):
        path, anchor = resolve(page, target)
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_links_the_index() -> None:
    assert "docs/README.md" in links((ROOT / "README.md").read_text())


def test_every_file_under_docs_is_reachable_from_the_index() -> None:
    reached, todo = {INDEX}, [INDEX]
    while todo:
        page = todo.pop()
        for target in filter(relative, links(page.read_text())):
            path, _ = resolve(page, target)
            if path.is_relative_to(DOCS) and path.suffix == ".md" and path.is_file() and path not in reached:
                reached.add(path)
                todo.append(path)
    every = {path.resolve() for path in DOCS.rglob("*") if path.is_file()}
    unreached = sorted(str(path.relative_to(ROOT)) for path in every - reached)
    assert unreached == [], f"not reachable from docs/README.md: {unreached}"


def test_a_broken_link_and_a_missing_anchor_are_caught(tmp_path: Path) -> None:
    """The checks can fail: a page naming a missing file and a missing heading is reported for both."""
    (tmp_path / "a.md").write_text("# Title\n\n[gone](b.md) and [here](#title) and [there](#nowhere)\n"
                                   "```\n[in a fence](c.md)\n```\n`[in code](d.md)`\n")
    page = tmp_path / "a.md"
    targets = links(page.read_text())
    assert targets == ["b.md", "#title", "#nowhere"]
    assert [t for t in targets if not resolve(page, t)[0].exists()] == ["b.md"]
    assert [t for t in targets if resolve(page, t)[1] not in anchors(page) | {""}] == ["#nowhere"]
