"""Kafka → ClickHouse: every gpusched topic, in batches, committed only after the insert.

A batch closes at ``sink_batch_max`` events or ``sink_flush_s`` seconds, whichever comes
first. Messages that fail validation go to their topic's dead-letter topic (awaited) and
are not inserted. The offsets are committed after the insert succeeds and the dead letters
are acknowledged; a failed insert is retried, never skipped. A batch that is replayed
after a crash writes rows with the same event ids, which the ReplacingMergeTree tables
collapse (count with FINAL or by distinct event_id).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaError
from pydantic import BaseModel

from gpusched.contracts import ContractError, DeadLetter, dead_letter_for, decode
from gpusched.contracts.health import Dependency
from gpusched.contracts.topics import TOPICS, topic_for
from gpusched.sink.settings import SinkSettings
from gpusched.store import Store

__all__ = ["Sink", "SinkStats"]

log = logging.getLogger(__name__)

_RETRY_S = 2.0


@dataclass
class SinkStats:
    inserted: dict[str, int] = field(default_factory=dict)
    dead_lettered: int = 0
    batches: int = 0


class Sink:
    """Consumes the topics of ``settings.topic_prefix`` into ``store``.

    Queries of the SQL endpoints run on engine connections of their own and share no
    lock with its inserts.
    """

    def __init__(
        self,
        settings: SinkSettings,
        store: Store,
        store_state: Dependency | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.store_state = store_state or Dependency("the store (ClickHouse)", "", log)
        self.stats = SinkStats()
        self.prefix = settings.topic_prefix

    async def run(self, stop: asyncio.Event) -> SinkStats:
        """Consume until ``stop`` is set; the batch in hand is inserted and committed first."""
        s = self.settings
        consumer = AIOKafkaConsumer(
            *(t.name(self.prefix) for t in TOPICS),
            **s.client_options(),
            group_id=f"{self.prefix}{s.sink_group_id}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 << 20,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=2_000,
        )
        producer = AIOKafkaProducer(**s.client_options(), acks="all")
        await consumer.start()
        await producer.start()
        try:
            while not stop.is_set():
                batch = await self._collect(consumer, stop)
                if batch:
                    await self._write(batch, producer)
                    try:
                        await consumer.commit()
                    except KafkaError as exc:
                        # the group moved on (a broker restart, a rebalance): the batch is
                        # read again and collapses onto the rows written (event ids)
                        log.warning("offsets not committed (%s); the batch will be replayed", exc)
                    self.stats.batches += 1
        finally:
            await consumer.stop()
            await producer.stop()
        return self.stats

    async def _collect(
        self, consumer: AIOKafkaConsumer, stop: asyncio.Event
    ) -> list[ConsumerRecord]:
        s = self.settings
        batch: list[ConsumerRecord] = []
        deadline = time.monotonic() + s.sink_flush_s
        while len(batch) < s.sink_batch_max and not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            got = await consumer.getmany(
                timeout_ms=max(int(left * 1000), 1), max_records=s.sink_batch_max - len(batch)
            )
            for records in got.values():
                batch.extend(records)
        return batch

    async def _write(self, batch: Sequence[ConsumerRecord], producer: AIOKafkaProducer) -> None:
        events: list[BaseModel] = []
        dead: list[tuple[str, DeadLetter]] = []
        for record in batch:
            topic = topic_for(record.topic, self.prefix)
            try:
                events.append(decode(topic.model, record.value or b""))
            except ContractError as exc:
                letter = dead_letter_for(record, exc)
                dead.append((topic.dlq(self.prefix), letter))
        if dead:
            sent = [
                await producer.send(name, letter.model_dump_json().encode())
                for name, letter in dead
            ]
            await asyncio.gather(*sent)
            self.stats.dead_lettered += len(dead)
            log.warning("dead-lettered %d messages (last: %s)", len(dead), dead[-1][1].error)
        while True:
            try:
                written = await asyncio.to_thread(self._insert, events)
                self.store_state.answered()
                break
            except Exception as exc:  # the store's errors are many; the batch must not be lost
                self.store_state.failed(f"{exc} (retrying every {_RETRY_S:g} s)")
                log.debug("insert of %d events failed (%s)", len(events), exc)
                await asyncio.sleep(_RETRY_S)
        for table, rows in written.items():
            self.stats.inserted[table] = self.stats.inserted.get(table, 0) + rows

    def _insert(self, events: list[BaseModel]) -> dict[str, int]:
        return self.store.insert_events(events)
