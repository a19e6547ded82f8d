"""A sink that dies between inserting a batch and committing its offsets (the failpoint
``GPUSCHED_SINK_FAILPOINT=after_insert`` exits at exactly that moment) and is restarted
reads the same batch again, and ClickHouse keeps it once: the raw table holds each sample
once even without FINAL, and the hourly materialized view equals the aggregate of
``telemetry FINAL``."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.pipeline import Pipeline, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SAMPLES = 4 * 8 * 5  # nodes x GPUs x rounds


def test_batch_replayed_after_a_crash_counts_once(pipeline: Pipeline) -> None:
    p = pipeline
    cluster = write_cluster(p.workdir / "c.cluster.csv", nodes=4, gpus_per_node=8)
    p.run("collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "5",
          "--speed", "50")  # fmt: skip
    # a static member (GPUSCHED_KAFKA_INSTANCE_ID): the restarted sink takes the crashed
    # one's place in the group at once instead of waiting out its session
    crashing = p.start(
        "sink", GPUSCHED_SINK_FAILPOINT="after_insert", GPUSCHED_KAFKA_INSTANCE_ID="sink-0"
    )
    assert crashing.wait(timeout=120) == 70, p.log("sink")  # inserted, then died uncommitted
    assert "failpoint after_insert" in p.log("sink")

    p.start("sink", GPUSCHED_KAFKA_INSTANCE_ID="sink-0")
    p.wait_for(
        "the offsets committed after the replay",
        lambda: (
            "reading the uncommitted batch again" in p.log("sink")
            and p.scalar("SELECT count() FROM telemetry FINAL") == SAMPLES
        ),
    )
    p.run("collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "1",
          "--speed", "50")  # fmt: skip
    p.wait_for("a later batch", lambda: p.scalar("SELECT count() FROM telemetry") == SAMPLES + 32)
    assert p.scalar("SELECT count() FROM telemetry FINAL") == SAMPLES + 32  # nothing doubled
    hourly = p.sql("SELECT sum(samples), round(sum(energy_wh), 6) FROM gpu_hourly")[0]
    raw = p.sql(
        "SELECT count(), round(sum(toFloat64(power_w) * interval_s / 3600), 6) FROM telemetry FINAL"
    )[0]
    assert hourly == raw
    # one member, the static one (a broker names a static member <instance id>-<uuid>)
    (member,) = _members(p.bootstrap, f"{p.prefix}gpusched-sink")
    assert member.startswith("sink-0-sink-"), member


def _members(bootstrap: str, group: str) -> list[str]:
    """The member ids of a consumer group."""

    async def describe() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            (described,) = await admin.describe_consumer_groups([group])
            return [m["member_id"] for m in described.to_object()["groups"][0]["members"]]
        finally:
            await admin.close()

    return asyncio.run(describe())
