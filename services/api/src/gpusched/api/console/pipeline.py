"""The pipeline's health as Kafka sees it: how far behind each consumer group of the
deployment is (end offsets minus committed offsets, summed over its partitions) and how
many messages each dead-letter topic holds (end minus beginning offsets: what retention
keeps). Read with an admin client and a group-less consumer, at most every few seconds."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from gpusched.api.jobs import kafka_failure
from gpusched.contracts import DLQ_SUFFIX, KafkaSettings
from gpusched.contracts.settings import client_options

__all__ = ["Pipeline", "PipelineWatch", "read_pipeline"]

_FRESH_S = 5.0  # a reading younger than this is shown again rather than read anew


@dataclass
class Pipeline:
    """Consumer lag per group and messages per dead-letter topic, or why unknown."""

    # without the deployment's topic prefix: group -> messages not yet consumed, and
    # dead-letter topic -> messages it holds
    lag: dict[str, int] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    at: float = field(default_factory=time.monotonic)


async def read_pipeline(kafka: KafkaSettings, timeout_s: float) -> Pipeline:
    """Read the lag of every consumer group and the size of every dead-letter topic whose
    names start with the deployment's topic prefix."""
    prefix = kafka.topic_prefix
    options = {**client_options(kafka), "request_timeout_ms": int(timeout_s * 1000)}
    admin = AIOKafkaAdminClient(**options)
    consumer = AIOKafkaConsumer(**options, enable_auto_commit=False)
    try:
        await admin.start()
        await consumer.start()
        groups = [g for g, _ in await admin.list_consumer_groups() if g.startswith(prefix)]
        committed = {g: await admin.list_consumer_group_offsets(g) for g in sorted(groups)}
        dlqs = sorted(
            t for t in await consumer.topics() if t.startswith(prefix) and t.endswith(DLQ_SUFFIX)
        )
        held = [TopicPartition(t, p) for t in dlqs for p in consumer.partitions_for_topic(t) or ()]
        wanted = {tp for offsets in committed.values() for tp in offsets} | set(held)
        ends = await consumer.end_offsets(list(wanted))
        starts = await consumer.beginning_offsets(held)
    finally:
        await consumer.stop()
        await admin.close()
    return Pipeline(
        lag={
            group[len(prefix) :]: sum(
                max(ends[tp] - at.offset, 0) for tp, at in offsets.items() if at.offset >= 0
            )
            for group, offsets in committed.items()
        },
        dead_letters={
            t[len(prefix) :]: sum(ends[tp] - starts[tp] for tp in held if tp.topic == t)
            for t in dlqs
        },
    )


class PipelineWatch:
    """The latest reading, refreshed when older than a few seconds; a failure is shown
    as the reading's error, never raised to the page."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 3.0) -> None:
        self.kafka, self.timeout_s = kafka, timeout_s
        self._last: Pipeline | None = None
        self._lock = asyncio.Lock()

    async def current(self) -> Pipeline:
        async with self._lock:
            if self._last is None or time.monotonic() - self._last.at > _FRESH_S:
                try:
                    self._last = await asyncio.wait_for(
                        read_pipeline(self.kafka, self.timeout_s), self.timeout_s * 2
                    )
                except (TimeoutError, KafkaError, OSError) as exc:
                    self._last = Pipeline(error=kafka_failure(exc, self.timeout_s))
            return self._last
