"""The daemon's ``/metrics``: scraped as samples, (name, labels) -> value, parsed and linted as Prometheus would."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from deviceplugin.standin import Kubelet
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    daemon_process,
)
from tests.support.topologies import fixture_copy


class Logs:
    """A daemon's stderr read line by line in a thread, each line parsed as JSON."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._new: queue.Queue[None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.raw.append(line)
            self.lines.append(json.loads(line))  # every line must be JSON: a non-JSON line fails the test
            self._new.put(None)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    def wait_for(self, name: str, where: Callable[[dict[str, Any]], bool] = lambda _: True,
                 timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.events(name) if where(line)]
            if found:
                return found[-1]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {name} event within {timeout:g} s; log: {self.raw}")
            try:
                self._new.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                pass

    def join(self) -> None:
        self._thread.join(timeout=10)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(address: str) -> Samples:
    return parse(exposition(address))


def parse(text: str) -> Samples:
    """The text exposition format as samples."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def eventually(address: str, check: Callable[[Samples], bool], what: str, timeout: float = 20.0) -> Samples:
    """Scrape until ``check`` holds: counters move in the daemon a moment after the kubelet sees the effect."""
    return read_until(lambda: scrape(address), check, what, timeout)


def read_until(read: Callable[[], Samples], check: Callable[[Samples], bool], what: str, timeout: float = 20.0,
               *, retry_on: tuple[type[Exception], ...] = ()) -> Samples:
    """``read()`` until ``check`` holds; a read raising one of ``retry_on`` is tried again until the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            samples = read()
        except retry_on:
            if time.monotonic() > deadline:
                raise
        else:
            if check(samples):
                return samples
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not seen within {timeout:g} s: {sorted(samples)}")
        time.sleep(0.1)


POOLS = {EXCLUSIVE: "exclusive", SHARED: "shared", INFRA: "infra"}


def pool_values(samples: Samples, name: str) -> dict[str, float | None]:
    return {r: value(samples, name, pool=p, resource=r) for r, p in POOLS.items()}


@dataclass(frozen=True)
class Metered:
    process: subprocess.Popen[str]
    logs: Logs
    sysfs: Path
    procfs: Path


def metered_daemon(kubelet: Kubelet, plugin_dir: Path, tmp_path: Path) -> Metered:
    """The CLI daemon on a copy of xeon_d (3 exclusive cores, 4 shared slots) with JSON logs, metrics on a
    free port and the stand-in's pod resources; its log lines are read as they come."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs, "--num-exclusive-cores", "3", "--shared-slots", "4",
                             "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                             "--pod-resources-socket", str(kubelet.pod_resources_socket))
    return Metered(process, Logs(process), sysfs, procfs)


def exposition(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        return reply.read().decode()


def lint(text: str) -> None:
    """``promtool check metrics``: exit 0 and no complaint about any series."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run .ci/install-system-packages (Debian package prometheus)"
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        result.stdout + result.stderr
