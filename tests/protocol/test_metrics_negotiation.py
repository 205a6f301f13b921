"""``/metrics`` answers in the format and encoding the scraper asks for, and carries no ``_created`` series.

The real daemon serves the kubelet stand-in; each scrape is a plain HTTP GET
with the headers a scraper sends, parsed by prometheus_client's own parsers
(the OpenMetrics one is strict: it refuses a body that is not OpenMetrics).
"""

from __future__ import annotations

import gzip
import urllib.request
from collections.abc import Iterator

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families
from prometheus_client.samples import Sample

from deviceplugin.observe.metrics import FIXED_FORMATS
from deviceplugin.standin import Kubelet
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    three_pool_pod,
    wait_registered,
)
from tests.support.metrics import lint, metered_daemon
from tests.support.monitoring import PROMETHEUS_ACCEPT


def get(address: str, **headers: str) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(f"http://{address}/metrics",
                                     headers={k.replace("_", "-"): v for k, v in headers.items()})
    with urllib.request.urlopen(request, timeout=10) as reply:  # urllib does not decompress: the raw body
        return {k.lower(): v for k, v in reply.headers.items()}, reply.read()


def samples(families: Iterator) -> list[Sample]:  # type: ignore[type-arg]
    return [sample for family in families for sample in family.samples]


def keys(found: list[Sample]) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    return {(s.name, frozenset(s.labels.items())) for s in found}


def test_the_scrape_format_and_encoding_follow_the_request_headers(kubelet: Kubelet, plugin_dir, tmp_path):
    daemon = metered_daemon(kubelet, plugin_dir, tmp_path)
    try:
        address = daemon.logs.wait_for("metrics_serving")["address"]
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        kubelet.admit(three_pool_pod("demo", exclusive=1))  # counters and histograms with samples

        headers, body = get(address)  # no Accept: the classic text format, uncompressed
        assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "content-encoding" not in headers
        text = body.decode()
        lint(text)
        plain = samples(text_families(text))

        headers, body = get(address, Accept=PROMETHEUS_ACCEPT)
        assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
        assert "content-encoding" not in headers
        openmetrics = body.decode()
        assert openmetrics.endswith("# EOF\n") and openmetrics.count("# EOF") == 1
        strict = samples(openmetrics_families(openmetrics))  # raises on anything OpenMetrics forbids
        assert keys(strict) == keys(plain)  # the same series, the fixed cmk_cpu_info ones among them
        assert ("cmk_cpu_info", frozenset({("cpu", "1"), ("pool", "exclusive"), ("numa_node", "0"),
                                           ("isolated", "true")})) in keys(strict)

        headers, body = get(address, Accept=PROMETHEUS_ACCEPT, Accept_Encoding="gzip")
        assert headers["content-encoding"] == "gzip"
        assert "Accept-Encoding" in headers["vary"]
        assert headers["content-length"] == str(len(body))
        assert keys(samples(openmetrics_families(gzip.decompress(body).decode()))) == keys(strict)
        headers, body = get(address, Accept_Encoding="br, gzip;q=0.5")
        assert headers["content-encoding"] == "gzip" and headers["content-type"].startswith("text/plain")
        assert keys(samples(text_families(gzip.decompress(body).decode()))) == keys(plain)
        headers, _ = get(address, Accept_Encoding="identity")
        assert "content-encoding" not in headers

        for found in (plain, strict):  # counters and histograms are there, their creation times are not
            names = {s.name for s in found}
            assert {"cmk_registrations_total", "cmk_allocate_duration_seconds_count"} <= names
            assert not [name for name in names if name.endswith("_created")]
        assert "_created" not in text and "_created" not in openmetrics

        for version in range(FIXED_FORMATS * 2):  # formats a client makes up: each answered, none kept past the bound
            headers, body = get(address, Accept=f"application/openmetrics-text;version=1.{version}.0")
            assert headers["content-type"].startswith(f"application/openmetrics-text; version=1.{version}.0")
            assert keys(samples(openmetrics_families(body.decode()))) == keys(strict)
    finally:
        daemon.process.terminate()
        daemon.process.wait(timeout=20)
        daemon.logs.join()
    assert daemon.process.returncode == 0
