"""Files made from the settings' declarations are as ``tools/settings.py`` makes them, never edited by hand."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "settings.py"


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("settings_tool", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chart_schema_and_the_docs_table_are_what_the_declarations_make() -> None:
    tool = _tool()
    stale = [str(path.relative_to(ROOT)) for path in tool.stale()]
    assert stale == [], f"regenerate with: python tools/settings.py ({stale})"


def test_every_plan_setting_has_its_row_and_every_chart_key_its_schema() -> None:
    from deviceplugin.cli.flags import FILE_KEYS, PLAN
    from deviceplugin.model.plan import PlanOptions
    from deviceplugin.model.settings import declared

    tool = _tool()
    table = tool.docs_table(PLAN.flags)
    assert [flag.name for flag in PLAN.flags] == [item.name for item in declared(PlanOptions)]
    assert all(f"`--{item.name} " in table for item in declared(PlanOptions))
    schema = tool.config_schema(tool.chart_keys())
    assert set(schema["properties"]) - {"default", "nodes"} == {flag.name for flag in tool.chart_keys()}
    assert schema["properties"]["num-exclusive-cores"] == {"type": "integer", "minimum": 0,
                                                          "maximum": FILE_KEYS["num-exclusive-cores"].key_schema["maximum"]}


def test_the_check_names_a_stale_file_and_fails(tmp_path: Path) -> None:
    """What a developer runs, and CI through the first test: ``python tools/settings.py --check``."""
    ok = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert (ok.returncode, ok.stderr) == (0, "")
    tool = _tool()
    edited = tool.docs_text(tool.DOCS_TABLE.read_text(), tool.PLAN.flags).replace("| packed |", "| spread |", 1)
    assert edited != tool.DOCS_TABLE.read_text()
    assert tool.docs_text(edited, tool.PLAN.flags) == tool.DOCS_TABLE.read_text()


def test_every_switch_is_a_boolean_in_the_chart_schema() -> None:
    """A switch's config key takes true/false: ``--set config.untaint-node=false`` was refused as not a string."""
    import json

    from deviceplugin.cli.flags import FILE_KEYS

    config = json.loads((ROOT / "charts" / "cmk-deviceplugin" / "values.schema.json").read_text())
    properties = config["properties"]["config"]["properties"]
    switches = [name for name, flag in FILE_KEYS.items() if flag.switch and name in properties]
    assert "untaint-node" in switches
    assert {name: properties[name] for name in switches} == {name: {"type": "boolean"} for name in switches}
