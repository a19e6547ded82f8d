"""Prometheus metrics on a service's /metrics (next to /healthz), from a running sink."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.pipeline import Pipeline, free_port, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url, timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_sink_counts_what_it_consumes_and_inserts(pipeline: Pipeline) -> None:
    p = pipeline
    port = free_port()
    p.start("sink", GPUSCHED_HEALTH_PORT=str(port))
    p.wait_for("the sink", lambda: p.scalar("SELECT 1") == 1, timeout=60)
    cluster = write_cluster(p.workdir / "c.cluster.csv", nodes=2, gpus_per_node=8)
    p.run("collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "2",
          "--speed", "50")  # fmt: skip
    p.wait_for("32 samples", lambda: p.scalar("SELECT count() FROM telemetry") == 32)
    url = f"http://127.0.0.1:{port}/metrics"
    metrics = p.wait_for(
        "the sink's metrics",
        lambda: (m := _samples(url)).get(
            ("gpusched_inserted_rows_total", (("table", "telemetry"),))
        ) == 32 and m,
    )  # fmt: skip
    assert (
        metrics[("gpusched_consumed_messages_total", (("topic", "gpusched.telemetry.v1"),))] == 32
    )
    assert metrics[("gpusched_insert_seconds_count", ())] >= 1
    assert metrics[("gpusched_batch_events_sum", ())] >= 32
    assert metrics[("gpusched_consumer_lag_messages", (("topic", "gpusched.telemetry.v1"),))] == 0
