"""A release is a thing: one version, shown by ``cmk -V``, named alike everywhere, with a licence and a changelog."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from deviceplugin import __version__
from tests.support.commands import cmk

ROOT = Path(__file__).resolve().parents[2]


def test_version_and_v_print_the_one_version() -> None:
    for flag in ("--version", "-V"):
        result = cmk(flag)
        assert (result.returncode, result.stdout, result.stderr) == (0, f"cmk {__version__}\n", ""), flag


def test_help_lists_the_operators_commands_before_the_in_container_ones() -> None:
    result = cmk("--help")
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.split("COMMAND\n", 1)[1].split("\noptions:")[0].splitlines()
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed[-2:] == ["isolate", "hook"], listed
    assert listed[0] == "describe"


def test_every_place_that_names_the_version_names_this_one() -> None:
    """The image tag in the kustomize base, the chart's version and appVersion, the newest changelog entry."""
    kustomization = yaml.safe_load((ROOT / "deploy/base/kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    chart = yaml.safe_load((ROOT / "charts/cmk-deviceplugin/Chart.yaml").read_text())
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert newest is not None
    assert {image["newTag"], chart["version"], chart["appVersion"], newest[1]} == {__version__}


def test_the_licence_is_the_full_apache_2_text_the_package_declares() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    sections = re.findall(r"^\s+(\d+)\. [A-Z][\w ]+\.", text, re.MULTILINE)
    assert sections == [str(n) for n in range(1, 10)]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    assert "license = Apache-2.0" in (ROOT / "setup.cfg").read_text()


def test_upgrade_notes_name_versions_not_dates() -> None:
    notes = (ROOT / "docs/user/upgrading.md").read_text()
    headings = re.findall(r"^## (.+)$", notes, re.MULTILINE)
    assert headings and all(re.search(r"\b\d+\.\d+\.\d+\b", h) for h in headings), headings
    assert f"To {__version__}" in notes
    for text in (notes, (ROOT / "CHANGELOG.md").read_text()):
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date where a version belongs"
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        found = re.search(r"(?:before|after|since) 20\d\d-\d\d", doc.read_text())
        assert not found, f"{doc.relative_to(ROOT)}: {found[0]!r} names a release by date; name its version"
