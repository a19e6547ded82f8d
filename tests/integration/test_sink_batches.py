"""The sink decodes a batch while the one before it is inserted, but plans and inserts a
batch only once the one before it is committed: at most one planned batch is ever
uncommitted, which is what its replay after a crash relies on (test_sink_replay.py).

Real broker, real engine. The store is the real one, slowed (so that the next batch is
read and decoded during an insert) and watched: each plan is checked against the offsets
the broker holds for the group at that moment."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from gpusched.contracts import GpuTelemetrySample, encode
from gpusched.contracts.topics import TELEMETRY
from gpusched.sink.consumer import Sink
from gpusched.sink.settings import SinkSettings
from gpusched.store import OffsetRange, Store, StoreSettings

pytestmark = pytest.mark.kafka

SAMPLES, BATCH = 2_000, 250


class _Watched(Store):
    """The real store; each plan is recorded beside the group's committed offsets, and
    the sink is stopped once every sample is in."""

    bootstrap = ""
    plans: list[tuple[list[OffsetRange], dict[tuple[str, int], int]]]
    inserted = 0
    done: Callable[[], None]

    def plan_batch(self, group: str, batch_id: str, ranges: Sequence[OffsetRange]) -> None:
        self.plans.append((list(ranges), asyncio.run(_committed(self.bootstrap, group))))
        super().plan_batch(group, batch_id, ranges)

    def insert_events(self, events: Any, token: str | None = None) -> dict[str, int]:
        time.sleep(0.2)  # the sink reads and decodes its next batch meanwhile
        written = super().insert_events(events, token)
        self.inserted += written.get("telemetry", 0)
        if self.inserted >= SAMPLES:
            self.done()
        return written


async def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {(tp.topic, tp.partition): o.offset for tp, o in offsets.items() if o.offset >= 0}
    finally:
        await admin.close()


async def test_a_batch_is_planned_only_once_the_one_before_is_committed(
    kafka_bootstrap: str, topic_prefix: str, chdb_dsn: str
) -> None:
    store = _Watched.open(StoreSettings(dsn=chdb_dsn, database=f"t_{uuid.uuid4().hex[:10]}"))
    store.bootstrap, store.plans = kafka_bootstrap, []
    now = datetime.now(UTC)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    await producer.start()
    try:
        for i in range(SAMPLES):
            sample = GpuTelemetrySample(
                ts=now + timedelta(seconds=i // 16), gpu_uuid=f"GPU-{i % 16:04d}",
                node_id=f"n{i % 16 // 8}", gpu_index=i % 8, gpu_model="V100",
                utilization_pct=50, memory_used_mib=1000, memory_total_mib=16384,
                power_w=200, temperature_c=60, sm_clock_mhz=1500, interval_s=1.0,
            )  # fmt: skip
            await producer.send(TELEMETRY.name(topic_prefix), encode(sample), key=b"k%d" % i)
        await producer.flush()
    finally:
        await producer.stop()

    settings = SinkSettings(
        kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
        sink_batch_max=BATCH, sink_flush_s=0.2, sink_sql_port=0,
    )  # fmt: skip
    sink, stop = Sink(settings, store), asyncio.Event()
    store.done = functools.partial(asyncio.get_running_loop().call_soon_threadsafe, stop.set)
    await asyncio.wait_for(sink.run(stop), 90)

    assert len(store.plans) >= SAMPLES // BATCH
    last: dict[tuple[str, int], int] = {}  # each partition's last planned offset
    for ranges, committed in store.plans:
        for r in ranges:
            tp = (r.topic, r.partition)
            if tp in last:  # the batch before on this partition: committed, exactly to here
                assert r.first == last[tp] + 1
                assert committed.get(tp) == r.first, (tp, committed.get(tp), r.first)
            last[tp] = r.last
    assert await _committed(kafka_bootstrap, sink.group) == {tp: o + 1 for tp, o in last.items()}
    assert store.query("SELECT count(), uniqExact(event_id) FROM telemetry") == [(SAMPLES, SAMPLES)]
