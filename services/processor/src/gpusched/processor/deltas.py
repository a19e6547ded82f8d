"""How the processor's workers talk to the merge topic: their consumer groups, and one
producer for the deltas (and the merger's views, priorities and reports)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer

from gpusched.contracts.producer import Producer
from gpusched.contracts.provision import ensure_internal_topic
from gpusched.contracts.topics import JOBS
from gpusched.processor.records import Delta
from gpusched.processor.settings import ProcessorSettings

__all__ = ["MERGED_BY", "DeltaProducer", "group_consumer"]

MERGED_BY = "gpusched-merged-by"  # header: the merge session that folded a delta in already


def group_consumer(
    settings: ProcessorSettings, app_id: str, role: str, *topics: str
) -> AIOKafkaConsumer:
    """A member of the processor's consumer group ``<app id>-<role>`` (static with
    ``GPUSCHED_KAFKA_INSTANCE_ID``) that commits itself, after its batch is handled;
    a killed worker's partitions move on after 6 s."""
    return AIOKafkaConsumer(
        *topics,
        **settings.client_options(),
        group_id=f"{app_id}-{role}",
        **settings.group_options(role),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=2_000,
    )


class DeltaProducer:
    """Sends deltas to the merge topic, and the merger's views, priorities and reports:
    a plain aiokafka producer, as Faust's per-message send path is several times slower
    for the thousands of node parts and views a second at 10,000 GPUs. Started once, by
    whichever stage needs it first."""

    def __init__(self, settings: ProcessorSettings, topic: str) -> None:
        self.settings, self.topic = settings, topic
        self.producer = Producer(settings, linger_ms=5, max_batch_size=1 << 20)
        self._topic_ready = False
        self._lock = asyncio.Lock()

    async def ready(self) -> None:
        """Once the merge topic exists (created here the first time) and the producer
        has started."""
        await self._started()

    async def _started(self) -> Producer:
        if not self._topic_ready:  # on every send: no lock once the topic is there
            async with self._lock:
                if not self._topic_ready:
                    await ensure_internal_topic(self.settings, self.topic, like=JOBS)
                    self._topic_ready = True
        await self.producer.start()
        return self.producer

    async def send(self, delta: Delta) -> asyncio.Future[Any]:
        """Queue ``delta``; the future resolves when the broker has acknowledged it."""
        producer = await self._started()
        value = delta.model_dump_json().encode()
        return await producer.send(self.topic, value, key=delta.key())

    async def send_all(self, deltas: Iterable[Delta], merged_by: bytes | None = None) -> None:
        """Queue ``deltas`` in record batches of as many as fit (the merge topic has one
        partition): a fifth of the cost of ``send`` one by one, for the thousands of node
        parts a second at 10,000 GPUs. ``flush`` waits for them. ``merged_by``: the merge
        session that has folded them in already (a header the merger skips them by)."""
        producer = await self._started()
        headers = [(MERGED_BY, merged_by)] if merged_by else []
        records = ((d.key(), d.model_dump_json().encode()) for d in deltas)
        await producer.send_many(self.topic, records, partition=0, headers=headers)

    async def publish(self, topic: str, key: bytes, value: bytes) -> None:
        """Queue ``value`` for ``topic`` (a contract topic); ``flush`` waits for it (views
        and priorities are not waited for: the next of each replaces it)."""
        producer = await self._started()
        await producer.send(topic, value, key=key)

    async def forget(self, key: bytes) -> None:
        """A tombstone under ``key``: compaction drops what was there."""
        producer = await self._started()
        await producer.send(self.topic, None, key=key)

    async def flush(self) -> None:
        await (await self._started()).flush()

    async def stop(self, *_: Any, **__: Any) -> None:
        """Flush and close (connected to the Faust app's ``on_before_shutdown``)."""
        await self.producer.stop()
