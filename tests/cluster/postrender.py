"""A Helm post-renderer: the chart's rendered objects with the node-local paths moved to this node's.

The chart, like ``deploy/base``, names the real host paths (``/opt/bin``, ``/var/run/cdi``, ...);
the tier's node keeps them in its own directories. This makes of a release what
:func:`tests.cluster.deploy.write_overlay` makes of the base, by the same :func:`moved` rule, and
nothing else. Run by ``helm --post-renderer``: manifests on stdin, the paths (JSON) as the argument.

A second argument, the API server's ``HOST:PORT``, also lets the daemon reach it where a real
cluster's service network would: the tier has no kube-proxy and its API server listens on the
host's loopback, so the daemon's pod takes the host's network and the in-cluster client that address.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

from tests.cluster.deploy import moved


def move(obj: Any, paths: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {k: move(v, paths) for k, v in obj.items()}
    if isinstance(obj, list):
        return [move(v, paths) for v in obj]
    return moved(obj, paths) if isinstance(obj, str) else obj


def reach_api(pod: dict[str, Any], address: str) -> None:
    """The daemon container of ``pod`` (a pod spec) talks to the API server at ``address`` from the host's network."""
    host, port = address.rsplit(":", 1)
    pod["hostNetwork"] = True
    for container in pod["containers"]:
        if container["name"] == "daemon":
            container.setdefault("env", []).extend([{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                                                    {"name": "KUBERNETES_SERVICE_PORT", "value": port}])


def main(argv: list[str]) -> int:
    paths = json.loads(argv[0])
    docs = [doc for doc in yaml.safe_load_all(sys.stdin.read()) if doc]
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            doc["spec"] = move(doc["spec"], paths)
            if len(argv) > 1:
                reach_api(doc["spec"]["template"]["spec"], argv[1])
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
