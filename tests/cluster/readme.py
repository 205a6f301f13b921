"""README's deploy commands, as a reader copies them: each block between ``<!-- deploy:NAME -->`` markers.

The tier runs them as written with only the variables README sets once (``deploy:vars``) given
this node's values, and the image imported under the name README builds (:data:`REGISTRY`): no
registry is reachable here. What else differs on the tier's node (its host paths, the API server on
its loopback) the tier's ``helm`` and ``kubectl`` change on the way, as they do for every deploy
(:mod:`tests.cluster.postrender`).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from deviceplugin import __version__

README = Path(__file__).resolve().parents[2] / "README.md"
#: The registry the tier's user "pushed" to: the product image is tagged with it in the node's containerd.
REGISTRY = "registry.cmk.test/cpu"


def block(name: str, text: str | None = None) -> str:
    """The commands between README's ``deploy:NAME`` markers, dedented as a reader pastes them."""
    text = README.read_text() if text is None else text
    found = re.search(rf"<!-- deploy:{name} -->\n(.*?)\n[ ]*<!-- /deploy:{name} -->", text, re.DOTALL)
    assert found, f"README.md has no <!-- deploy:{name} --> block"
    return textwrap.dedent(found.group(1)).strip() + "\n"


def variables(values: dict[str, str]) -> str:
    """README's ``deploy:vars`` block with each variable's value replaced by ``values``' (every one must be given)."""
    lines = []
    for line in block("vars").splitlines():
        name = line.split("=", 1)[0]
        assert name in values, f"README sets {name}, which the tier gives no value"
        lines.append(f"{name}={values[name]}")
    return "\n".join(lines) + "\n"


def image() -> str:
    """The image README's step 1 builds, for the tier's :data:`REGISTRY`."""
    return f"{REGISTRY}/cmk-deviceplugin:{__version__}"
