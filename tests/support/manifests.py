"""The deploy/ manifests as kubectl kustomize renders them, and the Kubernetes versions they are validated against."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]


DEPLOY = ROOT / "deploy"


OLDEST = "1.30.0"


VERSIONS = sorted({OLDEST, kubernetes_validate.latest_version()})


@cache
def render(kustomization: str) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run(["kubectl", "kustomize", str(DEPLOY / kustomization)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"kubectl kustomize {kustomization}: {proc.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def objects(kind: str, kustomization: str) -> list[dict[str, Any]]:
    return [obj for obj in render(kustomization) if obj["kind"] == kind]

