"""The sink decodes a batch while the one before it is inserted, but plans and inserts a
batch only once the one before it is committed: at most one planned batch is ever
uncommitted, which is what its replay after a crash relies on (test_sink_replay.py). And
rebalances in the middle of that lose nothing and count nothing twice.

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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from gpusched.contracts import TOPICS, GpuTelemetrySample, encode
from gpusched.contracts.topics import TELEMETRY
from gpusched.sink.consumer import Sink
from gpusched.sink.settings import SinkSettings
from gpusched.store import OffsetRange, Store, StoreSettings

pytestmark = pytest.mark.kafka

BATCH = 250


class _Watched(Store):
    """The real store; each plan is recorded beside the group's committed offsets, and
    the sink is stopped once ``expected`` distinct samples are in."""

    bootstrap = ""
    expected = 0
    plans: list[tuple[list[OffsetRange], dict[tuple[str, int], int]]]
    done: Callable[[], None]

    def plan_batch(self, group: str, batch_id: str, ranges: Sequence[OffsetRange]) -> None:
        self.plans.append((list(ranges), asyncio.run(_committed(self.bootstrap, group))))
        super().plan_batch(group, batch_id, ranges)

    def insert_events(self, events: Any, token: str | None = None) -> dict[str, int]:
        time.sleep(0.2)  # the sink reads and decodes its next batch meanwhile
        written = super().insert_events(events, token)
        if self.query("SELECT uniqExact(event_id) FROM telemetry")[0][0] >= self.expected:
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


async def _produce(bootstrap: str, prefix: str, count: int, every_s: float = 0.0) -> None:
    """``count`` samples of 16 GPUs, stamped now; 100 at a time ``every_s`` apart."""
    now = datetime.now(UTC)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for i in range(count):
            sample = GpuTelemetrySample(
                ts=now + timedelta(seconds=i // 16), gpu_uuid=f"GPU-{i % 16:04d}",
                node_id=f"n{i % 16 // 8}", gpu_index=i % 8, gpu_model="V100",
                utilization_pct=50, memory_used_mib=1000, memory_total_mib=16384,
                power_w=200, temperature_c=60, sm_clock_mhz=1500, interval_s=1.0,
            )  # fmt: skip
            await producer.send(TELEMETRY.name(prefix), encode(sample), key=b"k%d" % i)
            if every_s and i % 100 == 99:
                await asyncio.sleep(every_s)
        await producer.flush()
    finally:
        await producer.stop()


async def _sink(bootstrap: str, prefix: str, dsn: str, expected: int) -> tuple[Sink, _Watched]:
    """A sink on a watched store; run it with ``run_sink``."""
    store = _Watched.open(StoreSettings(dsn=dsn, database=f"t_{uuid.uuid4().hex[:10]}"))
    store.bootstrap, store.expected, store.plans = bootstrap, expected, []
    settings = SinkSettings(
        kafka_bootstrap_servers=bootstrap, topic_prefix=prefix,
        sink_batch_max=BATCH, sink_flush_s=0.2, sink_sql_port=0,
    )  # fmt: skip
    return Sink(settings, store), store


async def _run(sink: Sink, store: _Watched) -> None:
    """Until every expected sample is in."""
    stop = asyncio.Event()
    store.done = functools.partial(asyncio.get_running_loop().call_soon_threadsafe, stop.set)
    await asyncio.wait_for(sink.run(stop), 120)


async def test_a_batch_is_planned_only_once_the_one_before_is_committed(
    kafka_bootstrap: str, topic_prefix: str, chdb_dsn: str
) -> None:
    samples = 2_000
    await _produce(kafka_bootstrap, topic_prefix, samples)
    sink, store = await _sink(kafka_bootstrap, topic_prefix, chdb_dsn, samples)
    await _run(sink, store)

    assert len(store.plans) >= samples // BATCH
    last: dict[tuple[str, int], int] = {}  # each partition's last planned offset
    for ranges, committed in store.plans:
        for r in ranges:
            tp = (r.topic, r.partition)
            if tp in last:  # the batch before on this partition: committed, exactly to here
                assert r.first == last[tp] + 1
                assert committed.get(tp) == r.first, (tp, committed.get(tp), r.first)
            last[tp] = r.last
    assert await _committed(kafka_bootstrap, sink.group) == {tp: o + 1 for tp, o in last.items()}
    assert store.query("SELECT count(), uniqExact(event_id) FROM telemetry") == [(samples, samples)]


async def test_rebalances_while_a_batch_is_inserted_lose_and_double_nothing(
    kafka_bootstrap: str, topic_prefix: str, chdb_dsn: str
) -> None:
    """Another member joins the sink's group five times while samples flow (each join
    and each leave is a rebalance, mostly while a batch is being inserted): once the
    group has committed every offset, every sample is stored, and the hourly view counts
    each once, though batches come back split between the members (one token a table
    block counted 3,211-3,250 of 3,000 with two joins; a token a partition's block)."""
    samples = 4_000
    sink, store = await _sink(kafka_bootstrap, topic_prefix, chdb_dsn, samples)
    store.done = lambda: None
    stop = asyncio.Event()
    running = asyncio.create_task(sink.run(stop))

    async def joins() -> None:
        for _ in range(5):
            await asyncio.sleep(0.3)
            member = AIOKafkaConsumer(
                *(t.name(topic_prefix) for t in TOPICS), bootstrap_servers=kafka_bootstrap,
                group_id=sink.group, enable_auto_commit=False, auto_offset_reset="earliest",
            )  # fmt: skip
            await member.start()
            until = time.monotonic() + 0.6
            while time.monotonic() < until:  # a member polls; it commits nothing
                await member.getmany(timeout_ms=200)
            await member.stop()

    await asyncio.gather(_produce(kafka_bootstrap, topic_prefix, samples, every_s=0.1), joins())
    for _ in range(600):  # until the group has committed every sample's offset
        committed = await _committed(kafka_bootstrap, sink.group)
        if (
            sum(o for (t, _), o in committed.items() if t == TELEMETRY.name(topic_prefix))
            >= samples
        ):
            break
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.wait_for(running, 60)
    assert store.query("SELECT uniqExact(event_id) FROM telemetry") == [(samples,)]
    assert store.query("SELECT sum(samples) FROM gpu_hourly") == [(samples,)]
