"""The /metrics listener on a loopback port: the metrics at /metrics, 404 at any other path
(it once answered the metrics at every path)."""

import httpx
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from dealbroker.metrics_server import serve
from tests.processes import free_port


def test_the_listener_answers_metrics_at_metrics_only() -> None:
    registry = CollectorRegistry()
    Counter("dealbroker_test_things", "Things.", registry=registry).inc(3)
    port = free_port()
    httpd = serve("127.0.0.1", port, registry)
    try:
        base = f"http://127.0.0.1:{port}"
        got = httpx.get(f"{base}/metrics", timeout=5)
        assert got.status_code == 200
        families = {f.name: f for f in text_string_to_metric_families(got.text)}
        assert families["dealbroker_test_things"].samples[0].value == 3
        assert httpx.get(f"{base}/metrics?name[]=dealbroker_test_things_total").status_code == 200
        for path in ("/", "/metricsx", "/metrics/", "/favicon.ico", "/deals/v1/deals"):
            answer = httpx.get(f"{base}{path}", timeout=5)
            assert answer.status_code == 404, path
            assert "dealbroker_test_things" not in answer.text
    finally:
        httpd.shutdown()
        httpd.server_close()
