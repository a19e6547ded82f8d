"""Prometheus metrics on a service's /metrics (next to /healthz), from a running sink."""

from __future__ import annotations

import pytest

from tests.pipeline import Pipeline, free_port, metric_samples, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


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
        lambda: (m := metric_samples(url)).get(
            ("gpusched_inserted_rows_total", (("table", "telemetry"),))
        ) == 32 and m,
    )  # fmt: skip
    assert (
        metrics[("gpusched_consumed_messages_total", (("topic", "gpusched.telemetry.v1"),))] == 32
    )
    assert metrics[("gpusched_insert_seconds_count", ())] >= 1
    assert metrics[("gpusched_batch_events_sum", (("consumer", "sink"),))] >= 32
    assert metrics[("gpusched_consumer_lag_messages", (("topic", "gpusched.telemetry.v1"),))] == 0
