"""The store goes away for 30 s while telemetry flows: the sink keeps the batch it could
not insert, retries it every few seconds, says once that the store went and once that it
came back, and loses and doubles nothing.

The store is a real ClickHouse engine in another process: ``gpusched store-server``
serves an embedded (chDB) store over ClickHouse's HTTP interface, and the sink reaches it
with an ``http://`` DSN as it would a ClickHouse server (no server of a current version
installs here: Debian's clickhouse-server is 18.16). The outage is a SIGKILL of that
process, the recovery a new one on the same data directory."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.pipeline import Pipeline, free_port, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

OUTAGE_S = 30
SAMPLES = 4 * 8 * 5  # nodes x GPUs x rounds, per collection


def test_the_sink_waits_out_a_store_outage_and_loses_nothing(pipeline: Pipeline) -> None:
    p = pipeline
    port = free_port()
    served = {"GPUSCHED_STORE_SERVER_PORT": str(port)}
    ping = f"http://127.0.0.1:{port}/ping"
    cluster = write_cluster(p.workdir / "c.cluster.csv", nodes=4, gpus_per_node=8)

    def collect() -> None:
        p.run("collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "5",
              "--speed", "50")  # fmt: skip

    p.start("store-server", **served)
    p.wait_for("the store-server", lambda: httpx.get(ping).text == "Ok.\n", 60)
    p.start("sink", GPUSCHED_STORE_DSN=f"http://127.0.0.1:{port}")
    collect()
    p.wait_for("the first samples", lambda: p.scalar("SELECT count() FROM telemetry") == SAMPLES)

    p.kill("store-server")
    down = time.monotonic()
    collect()  # acknowledged by the broker while the store is down
    p.wait_for("the sink to see the store go", lambda: "is unreachable" in p.log("sink"))
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
    assert "sink" in p.alive(), p.log("sink")
    assert "is back after" not in p.log("sink")

    p.start("store-server", **served)
    p.wait_for(
        "the samples of the outage",
        lambda: p.scalar("SELECT count() FROM telemetry FINAL") == 2 * SAMPLES,
    )
    assert p.scalar("SELECT count() FROM telemetry") == 2 * SAMPLES  # nothing doubled
    hourly = p.sql("SELECT sum(samples), round(sum(energy_wh), 6) FROM gpu_hourly")[0]
    raw = p.sql(
        "SELECT count(), round(sum(toFloat64(power_w) * interval_s / 3600), 6) FROM telemetry FINAL"
    )[0]
    assert hourly == raw
    sink = p.log("sink")
    assert sink.count("is unreachable") == 1, sink  # said once, not once a retry
    assert sink.count("is back after") == 1, sink
    assert "Unexpected Http Driver Exception" not in sink  # clickhouse-connect's, per retry
    assert "after connection broken by" not in sink  # urllib3's, per retry
