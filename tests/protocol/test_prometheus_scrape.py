"""A real Prometheus scrapes the real daemon and evaluates the shipped rules and every dashboard query on it.

Debian's Prometheus server (the ``prometheus`` package, beside promtool) scrapes the daemon every
second as job cmk-deviceplugin, negotiating as it does everywhere (OpenMetrics first, gzip), with
deploy/prometheus/*-rules.yaml loaded. Then its HTTP API says: the target is up with no scrape
error, every rule evaluates without error, every dashboard query runs and returns series, and no
``_created`` series was ingested.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from deviceplugin.standin import Kubelet
from tests.support.cgroups import container, cpuset_root
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    three_pool_pod,
    wait_registered,
)
from tests.support.metrics import metered_daemon
from tests.support.monitoring import RULE_FILES, queries
from tests.support.procfs_counters import Known, write_counters

JOB = "cmk-deviceplugin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def prometheus(target: str, tmp_path: Path) -> Iterator[Callable[[str, dict[str, str]], Any]]:
    """A Prometheus scraping ``target`` every second with the rules loaded; yields ``api(path, params)``."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: run .ci/install-system-packages (Debian package prometheus)"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in RULE_FILES],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}],
    }))
    address = f"127.0.0.1:{free_port()}"
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address={address}", "--log.level=warn"],
                               stdout=log, stderr=subprocess.STDOUT)

    def api(path: str, params: dict[str, str]) -> Any:
        url = f"http://{address}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            answer = json.loads(reply.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    try:
        yield api
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except OSError:  # Prometheus still starting
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not seen within {timeout:g} s")
        time.sleep(0.5)


def test_prometheus_scrapes_the_daemon_and_runs_every_rule_and_dashboard_query(kubelet: Kubelet, plugin_dir,
                                                                                 tmp_path):
    daemon = metered_daemon(kubelet, plugin_dir, tmp_path)
    write_counters(daemon.procfs, {cpu: Known(user=10, idle=10, device_irqs=5, timer_irqs=7, net_rx=3)
                                   for cpu in range(16)})
    container(cpuset_root(daemon.sysfs), "a" * 64, range(16))
    try:
        address = daemon.logs.wait_for("metrics_serving")["address"]
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        kubelet.admit(three_pool_pod("demo", exclusive=1))
        with prometheus(address, tmp_path) as api:
            def scraped() -> list[Any]:  # three scrapes in: rates over them have two points and more
                return api("query", {"query": f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3'})["result"]

            until(scraped, "three scrapes")
            (target,) = api("targets", {"state": "active"})["activeTargets"]
            assert (target["health"], target["lastError"]) == ("up", ""), target

            def evaluated() -> list[dict[str, Any]]:
                rules = [r for g in api("rules", {})["groups"] for r in g["rules"]]
                return rules if all(r.get("lastEvaluation", "").startswith("2") and
                                    not r["lastEvaluation"].startswith("0001") for r in rules) else []

            rules = until(evaluated, "every rule evaluated")
            assert len(rules) == sum(len(g["rules"]) for p in RULE_FILES for g in yaml.safe_load(p.read_text())["groups"])
            assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []

            empty = []
            for where, expr in queries():
                if not api("query", {"query": expr})["result"]:
                    empty.append(where)
            assert empty == [], f"dashboard queries with no series on a real scrape: {empty}"

            created = api("series", {"match[]": f'{{__name__=~".+_created", job="{JOB}"}}'})
            assert created == []
            assert api("series", {"match[]": f'{{__name__="cmk_registrations_total", job="{JOB}"}}'})
    finally:
        daemon.process.terminate()
        daemon.process.wait(timeout=20)
        daemon.logs.join()
    assert daemon.process.returncode == 0
