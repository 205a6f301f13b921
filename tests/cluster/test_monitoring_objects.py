"""The monitoring component's objects as the real API server takes them, once the operator's CRDs are there.

The prometheus-operator's own CRDs (its Go module, as tests/support/monitoring.py fetches them) are created
on the cluster tier's API server; then every object ``kubectl kustomize deploy/components/monitoring``
renders is applied with ``--dry-run=server --validate=strict`` (the server's own schema checks,
unknown fields included) in a namespace of the test's own. The CRDs and that namespace are deleted
again, so the other tests see the cluster as before (the base's objects are the deploy tests').
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import yaml

from tests.cluster.node import Node
from tests.support.manifests import DEPLOY
from tests.support.monitoring import OPERATOR_CRDS, operator_crd_dir


def test_the_api_server_takes_every_monitoring_object_with_the_operators_crds(node: Node) -> None:
    crds = [operator_crd_dir() / name for name in OPERATOR_CRDS.values()]
    rendered = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "components" / "monitoring")], capture_output=True,
                              text=True, check=True).stdout
    namespace = f"cmk-monitoring-{uuid.uuid4().hex[:8]}"
    objects = [{**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
               for obj in yaml.safe_load_all(rendered) if obj]
    assert {obj["kind"] for obj in objects} == {"PodMonitor", "PrometheusRule", "ConfigMap"}
    node.kubectl("create", "namespace", namespace)
    try:
        for crd in crds:
            node.kubectl("create", "-f", str(crd))
        node.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     *[f"crd/{yaml.safe_load(Path(crd).read_text())['metadata']['name']}" for crd in crds])
        for obj in objects:
            result = node.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                                  input=json.dumps(obj), check=False)
            assert result.returncode == 0, f"{obj['kind']}/{obj['metadata']['name']}: {result.stderr}"
        broken = next(obj for obj in objects if obj["kind"] == "PodMonitor")
        broken = {**broken, "spec": {**broken["spec"], "podMetricsEndpoint": broken["spec"]["podMetricsEndpoints"]}}
        refused = node.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                               input=json.dumps(broken), check=False)
        assert refused.returncode != 0 and "podMetricsEndpoint" in refused.stderr, refused.stderr
    finally:
        node.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for crd in crds:
            node.kubectl("delete", "--ignore-not-found", "-f", str(crd), check=False)
