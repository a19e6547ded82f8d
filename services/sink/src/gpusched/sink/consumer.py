"""Kafka → ClickHouse: every gpusched topic, in batches, committed only after the insert.

A batch closes at ``sink_batch_max`` events or ``sink_flush_s`` seconds, whichever comes
first. Messages that fail validation go to their topic's dead-letter topic (awaited) and
are not inserted. The offsets are committed after the insert succeeds and the dead letters
are acknowledged; a failed insert is retried, never skipped.

A batch is inserted once even across a crash between its insert and its commit. Before
inserting, the sink records the batch's offset range per partition (``sink_batches``);
each table's block carries a deduplication token made from those ranges, and the blocks
of telemetry (which the hourly view sums) are one per partition, with a token of that
partition's range. After a restart (or a rebalance), a recorded range that starts at a
partition's committed offset was not committed: the sink reads exactly those ranges again
as its first batch, so the tokens are the same and ClickHouse skips the blocks it already
has, in the tables and in the hourly materialized view, also when the partitions of a
batch come back split between the members of the group. (The raw tables collapse a
replay by event id anyway; the hourly aggregate could not.)

A batch is decoded while the one before it is inserted, and inserted once that one is
committed, so that at most one planned batch is ever uncommitted: when a commit fails
because a rebalance has revoked the partitions, the batch after it is not inserted, and
the failed one is read again with its own ranges first. A batch decoded across a
rebalance is not inserted: the consumer moves back to its first records and reads them
again after the replay (its dead letters, if any, are then sent twice).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from pydantic import BaseModel

from gpusched.contracts import ContractError, DeadLetter, dead_letter_for, decode
from gpusched.contracts.health import Dependency
from gpusched.contracts.metrics import (
    BATCH_EVENTS,
    CONSUMED,
    CONSUMER_LAG,
    DEAD_LETTERED,
    INSERT_ROWS,
    INSERT_SECONDS,
)
from gpusched.contracts.producer import Producer
from gpusched.contracts.topics import TOPICS, topic_for
from gpusched.sink.settings import SinkSettings
from gpusched.store import OffsetRange, Store, batch_token, table_for

__all__ = ["Sink", "SinkStats"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_Events = dict[tuple[str, int], list[BaseModel]]  # (topic, partition) -> its valid events

_RETRY_S = 2.0
_REPLAY_WITHIN_S = 30.0  # longest wait for the records of an uncommitted batch


class _OnAssign(ConsumerRebalanceListener):  # type: ignore[misc]
    """Notes the partitions a (re)join assigned: their uncommitted batch comes first."""

    def __init__(self) -> None:
        self.assigned: set[TopicPartition] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned = set(assigned)


async def _measure_lag(consumer: AIOKafkaConsumer, prefix: str) -> None:
    """Messages not consumed yet per topic: high-water mark minus position, summed over
    the partitions this process holds."""
    lag: dict[str, int] = {}
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is not None:
            behind = max(high - await consumer.position(tp), 0)
            lag[tp.topic] = lag.get(tp.topic, 0) + behind
    for topic, behind in lag.items():
        CONSUMER_LAG.labels(topic=topic.removeprefix(prefix)).set(behind)


async def _landed(landing: asyncio.Task[None] | None) -> None:
    """Wait for a batch's insert and commit (nothing when there is none)."""
    if landing is not None:
        await landing


def _rewind(consumer: AIOKafkaConsumer, batch: Sequence[ConsumerRecord]) -> None:
    """Move back to the first record of ``batch`` on each partition still assigned. The
    rebalance reset the positions to the committed offsets, but the batch may have been
    read after that reset, from them: without this its records would be skipped. (What
    lies before its first records was inserted by the batches before.)"""
    _seek_to_firsts(consumer, _ranges(batch))


def _seek_to_firsts(consumer: AIOKafkaConsumer, ranges: Sequence[OffsetRange]) -> None:
    """Move to the first offset of each range on the partitions still assigned."""
    mine = consumer.assignment()
    for r in ranges:
        tp = TopicPartition(r.topic, r.partition)
        if tp in mine:
            consumer.seek(tp, r.first)


def _ranges(batch: Sequence[ConsumerRecord]) -> list[OffsetRange]:
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    for r in batch:
        first, last = spans.get((r.topic, r.partition), (r.offset, r.offset))
        spans[(r.topic, r.partition)] = (min(first, r.offset), max(last, r.offset))
    return [OffsetRange(t, p, first, last) for (t, p), (first, last) in sorted(spans.items())]


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
        self.group = f"{self.prefix}{settings.sink_group_id}"
        self._unlanded: list[OffsetRange] | None = None  # a batch inserted, not committed

    async def run(self, stop: asyncio.Event) -> SinkStats:
        """Consume until ``stop`` is set; the batch in hand is inserted and committed first."""
        s = self.settings
        consumer = AIOKafkaConsumer(
            **s.client_options(),
            group_id=self.group,
            **s.group_options("sink"),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 << 20,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=2_000,
        )
        producer = Producer(s)  # dead letters
        joined = _OnAssign()
        consumer.subscribe([t.name(self.prefix) for t in TOPICS], listener=joined)
        await consumer.start()
        landing: asyncio.Task[None] | None = None  # the previous batch's insert and commit
        try:
            while not stop.is_set():
                if joined.assigned is not None:
                    await _landed(landing)  # its commit comes before the replay's positions
                    assigned, joined.assigned = joined.assigned, None
                    self._unlanded = None  # the replay reads from the committed offsets
                    batch = await self._replay(consumer, assigned, stop)
                else:
                    batch = await self._collect(consumer, stop)
                if not batch:
                    continue
                # decoded while the previous batch is inserted (the engine runs in a
                # thread, mostly without the GIL), inserted only once that one is
                # committed: at most one planned batch is uncommitted at any time
                events = await self._decoded(batch, producer)
                await _landed(landing)
                if joined.assigned is not None or self._unlanded is not None:
                    # a rebalance came, or the batch before was not committed: read this
                    # one again after the replay, wherever it was read from
                    _rewind(consumer, batch)
                    self._read_unlanded_again(consumer, joined)
                    continue
                landing = asyncio.create_task(self._land(consumer, events, _ranges(batch)))
            await _landed(landing)
        finally:
            if landing is not None and not landing.done():
                landing.cancel()
            await consumer.stop()
            await producer.stop()
        return self.stats

    async def _land(
        self, consumer: AIOKafkaConsumer, events: _Events, ranges: list[OffsetRange]
    ) -> None:
        """Insert a decoded batch, then commit its offsets (those of its own records: the
        consumer has read on)."""
        written = await self._stored(self._insert, events, ranges)
        for table, rows in written.items():
            self.stats.inserted[table] = self.stats.inserted.get(table, 0) + rows
            INSERT_ROWS.labels(table=table).inc(rows)
        if self.settings.sink_failpoint == "after_insert":
            log.error("failpoint after_insert: exiting before the commit")
            os._exit(70)
        offsets = {TopicPartition(r.topic, r.partition): r.last + 1 for r in ranges}
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:
            # The group moved on (a broker restart, a rebalance): the batch is read again
            # and collapses onto the rows written. Revoked, or refused for an old
            # generation, while the rebalance is not signalled yet, it is read again with
            # its own ranges before anything after it is planned (_read_unlanded_again):
            # otherwise the next batch's plan replaces its plan, and the rebalance's
            # replay has nothing to match (one CI run counted 4,426 of 4,000 samples in
            # the hourly view so). Other failures leave the consumer where it is: the
            # batches after it commit past it.
            if isinstance(exc, IllegalStateError | CommitFailedError):
                self._unlanded = ranges
            log.warning("offsets not committed (%s); the batch will be replayed", exc)
        self.stats.batches += 1
        await _measure_lag(consumer, self.prefix)

    def _read_unlanded_again(self, consumer: AIOKafkaConsumer, joined: _OnAssign) -> None:
        """After a batch whose commit failed: back to its first records on the partitions
        still assigned, and a replay next, so that it is read again with the ranges it
        was planned with (the same tokens) before any later batch is planned there.
        Otherwise the next batch's plan would replace its plan, and the records between
        would come back later in ranges of other tokens: counted twice by the hourly
        view. (The rebalance's replay starts from the committed offsets anyway.)"""
        if self._unlanded is None:
            return
        _seek_to_firsts(consumer, self._unlanded)
        self._unlanded = None
        if joined.assigned is None:
            joined.assigned = set(consumer.assignment())

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

    async def _replay(
        self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition], stop: asyncio.Event
    ) -> list[ConsumerRecord]:
        """The batch planned but not committed on ``assigned`` partitions, read again
        range by range (nothing when every planned range was committed)."""
        plans = await self._stored(self.store.planned, self.group)
        wanted: dict[TopicPartition, OffsetRange] = {}
        for plan in plans:
            tp = TopicPartition(plan.topic, plan.partition)
            if tp in assigned and await consumer.position(tp) == plan.first:
                wanted[tp] = plan
        if not wanted:
            return []
        log.info("reading the uncommitted batch again: %d partitions", len(wanted))
        consumer.pause(*assigned)
        batch: list[ConsumerRecord] = []
        left = set(wanted)
        consumer.resume(*left)
        deadline = time.monotonic() + _REPLAY_WITHIN_S
        while left and not stop.is_set() and time.monotonic() < deadline:
            got = await consumer.getmany(*left, timeout_ms=500)
            for tp, records in got.items():
                last = wanted[tp].last
                batch.extend(r for r in records if r.offset <= last)
                if records and records[-1].offset >= last:
                    consumer.seek(tp, last + 1)
                    consumer.pause(tp)
                    left.discard(tp)
        if left:
            log.warning("records of the uncommitted batch are gone from %s (retention?): "
                        "the rest is inserted as a new batch", sorted(map(str, left)))  # fmt: skip
        consumer.resume(*assigned)
        return batch

    async def _decoded(self, batch: Sequence[ConsumerRecord], producer: Producer) -> _Events:
        """The batch's valid events by the partition they came from; the others
        dead-lettered (acknowledged) with why."""
        events: _Events = defaultdict(list)
        dead: list[tuple[str, DeadLetter]] = []
        BATCH_EVENTS.labels(consumer="sink").observe(len(batch))
        consumed: Counter[str] = Counter()
        for record in batch:
            topic = topic_for(record.topic, self.prefix)
            consumed[topic.base] += 1
            try:
                event = decode(topic.model, record.value or b"")
                events[record.topic, record.partition].append(event)
            except ContractError as exc:
                letter = dead_letter_for(record, exc)
                dead.append((topic.dlq(self.prefix), letter))
        for base, count in consumed.items():  # once a batch: labels() per record cost 8%
            CONSUMED.labels(topic=base).inc(count)
        if dead:
            sent = [
                await producer.send(name, letter.model_dump_json().encode())
                for name, letter in dead
            ]
            await producer.delivered(sent)
            for name, _ in dead:
                DEAD_LETTERED.labels(topic=name.removeprefix(self.prefix)).inc()
            self.stats.dead_lettered += len(dead)
            log.warning("dead-lettered %d messages (last: %s)", len(dead), dead[-1][1].error)
        return events

    async def _stored(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the store in a thread, retried every few seconds while the
        store fails (its errors are many; a batch must not be lost)."""
        while True:
            try:
                result = await asyncio.to_thread(call, *args)
                self.store_state.answered()
                return result
            except Exception as exc:
                self.store_state.failed(f"{exc} (retrying every {_RETRY_S:g} s)")
                log.debug("%s failed (%s)", getattr(call, "__name__", call), exc)
                await asyncio.sleep(_RETRY_S)

    def _insert(self, events: _Events, ranges: list[OffsetRange]) -> dict[str, int]:
        """Plan the batch, then insert it: one block per table under the batch's token,
        except for tables a view sums (telemetry), whose blocks are one per partition
        under a token of that partition's range, so that a batch read again in parts
        (some partitions now, some after another member of the group let them go) is
        skipped part by part. (A block costs ~20 ms in chDB: not every table pays it.)"""
        token = batch_token(self.group, ranges)
        written: Counter[str] = Counter()
        whole: list[BaseModel] = []
        with INSERT_SECONDS.time():
            self.store.plan_batch(self.group, token, ranges)
            for r in ranges:
                part = events.get((r.topic, r.partition), [])
                if part and table_for(topic_for(r.topic, self.prefix).model).summed:
                    written.update(self.store.insert_events(part, batch_token(self.group, [r])))
                else:
                    whole += part
            if whole:
                written.update(self.store.insert_events(whole, token))
        return dict(written)
