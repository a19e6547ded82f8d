"""The producer every gpusched service sends with: idempotent, acknowledged by every
in-sync replica, and never waiting without end.

aiokafka's idempotent producer retries a batch until it is delivered (it never expires
one), and its ``stop()`` waits until every batch is: during a broker outage a send's
future, a flush and a stop would wait for as long as the outage lasts
(aio-libs/aiokafka#1101). After ``OutOfOrderSequenceNumber`` its sender fails every
batch and sends nothing more (aio-libs/aiokafka#1017). ``Producer`` bounds each wait by
a delivery timeout, as the Java client's ``delivery.timeout.ms`` does: what is not
acknowledged in time fails with ``KafkaTimeoutError``, the producer is closed at once
(its batches not yet sent are dropped, so a record reported as failed does not arrive
later) and a new one is made on the next send. The new producer has a new producer id,
so a record its caller sends again may be a duplicate of one that did arrive: every
consumer of ours collapses duplicates by event id (ReplacingMergeTree, the folds).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaTimeoutError,
    OutOfOrderSequenceNumber,
    ProducerClosed,
    ProducerFenced,
    UnknownProducerId,
)
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata

from gpusched.contracts.settings import KafkaSettings, producer_options

__all__ = ["CLOSE_TIMEOUT_S", "DELIVERY_TIMEOUT_S", "Producer"]

log = logging.getLogger(__name__)

DELIVERY_TIMEOUT_S = 30.0  # aiokafka expires a batch after its request timeout, 40 s
CLOSE_TIMEOUT_S = 5.0  # how long stop() waits for batches not yet acknowledged

T = TypeVar("T")

# The producer cannot go on after these (its sender has stopped, or another client has
# its id, or it was closed under the caller): a new one takes the record.
_REPLACE = (OutOfOrderSequenceNumber, ProducerFenced, UnknownProducerId, ProducerClosed)


class Producer:
    """An ``AIOKafkaProducer`` (``producer_options``: ``acks=all``, idempotent) made
    when first needed and again after it had to be closed; ``options`` are passed to it.
    Every wait is bounded by ``delivery_timeout_s``, ``stop`` by ``close_timeout_s``."""

    def __init__(
        self,
        kafka: KafkaSettings | str,
        *,
        delivery_timeout_s: float = DELIVERY_TIMEOUT_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        **options: Any,
    ) -> None:
        self.kafka = kafka
        self.options = {"request_timeout_ms": int(delivery_timeout_s * 1000), **options}
        self.delivery_timeout_s, self.close_timeout_s = delivery_timeout_s, close_timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()  # one start at a time
        self.generation = 0  # producers made so far

    async def start(self) -> AIOKafkaProducer:
        """The running producer: started now when there is none."""
        if self._producer is not None:  # on every send: no lock once started
            return self._producer
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(**producer_options(self.kafka), **self.options)
                try:
                    await self._within(producer.start(), "start")
                except BaseException:
                    await _close(producer, self.close_timeout_s)
                    raise
                self._producer = producer
                self.generation += 1
            return self._producer

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; its future resolves once the broker has acknowledged it
        (wait for futures with ``delivered``: a bare ``await`` is not bounded)."""
        return await self._call(
            lambda p: p.send(topic, value, key=key, partition=partition, headers=headers)
        )

    async def send_and_wait(
        self, topic: str, value: bytes | None, *, key: bytes | None = None
    ) -> RecordMetadata:
        sent = await self.send(topic, value, key=key)
        await self.delivered([sent])
        return sent.result()

    async def create_batch(self) -> BatchBuilder:
        """An empty record batch for ``send_batch``."""
        return (await self.start()).create_batch()

    async def send_batch(
        self, batch: BatchBuilder, topic: str, *, partition: int
    ) -> asyncio.Future[RecordMetadata]:
        return await self._call(lambda p: p.send_batch(batch, topic, partition=partition))

    async def send_many(
        self,
        topic: str,
        records: Iterable[tuple[bytes, bytes]],
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> list[asyncio.Future[RecordMetadata]]:
        """Queue (key, value) records in record batches, each key to the partition ``send``
        would choose (the default partitioner's murmur2, as the Java client's) unless
        ``partition`` is given: 3 µs a record against 15-23 µs one by one. The futures
        resolve as their batches are acknowledged (wait with ``delivered``)."""
        producer = await self.start()
        partitions = sorted(await producer.partitions_for(topic))
        futures: list[asyncio.Future[RecordMetadata]] = []
        batches: dict[int, BatchBuilder] = {}
        extra = headers or []
        for key, value in records:
            p = partition if partition is not None else partitions[_index(key, len(partitions))]
            batch = batches.get(p) or await self.create_batch()
            if batch.append(key=key, value=value, timestamp=None, headers=extra) is None:
                if batch.record_count():  # full
                    futures.append(await self.send_batch(batch, topic, partition=p))
                    batch = await self.create_batch()
                if batch.append(key=key, value=value, timestamp=None, headers=extra) is None:
                    # too large for any batch: send says so
                    futures.append(await self.send(topic, value, key=key, partition=p))
            batches[p] = batch
        for p, batch in batches.items():
            if batch.record_count():
                futures.append(await self.send_batch(batch, topic, partition=p))
        return futures

    async def delivered(self, futures: Iterable[asyncio.Future[Any]]) -> None:
        """Wait until the broker has acknowledged every one of ``futures`` (from ``send``),
        or raise the first failure; ``KafkaTimeoutError`` after the delivery timeout,
        and the producer is closed (what it had not sent is dropped)."""
        waiting = set(futures)
        if not waiting:
            return
        done, late = await asyncio.wait(waiting, timeout=self.delivery_timeout_s)
        if late:
            # failed by discard, now or when the closing producer ends (a close that
            # outlasts close_timeout_s fails the rest later): retrieved then, to keep
            # asyncio quiet; the caller hears of them through the error raised here
            for future in late:
                future.add_done_callback(_retrieve)
            await self.discard(f"not acknowledged within {self.delivery_timeout_s:g} s")
            raise KafkaTimeoutError(
                f"{len(late)} records not acknowledged within {self.delivery_timeout_s:g} s"
            )
        for future in done:
            error = future.exception()
            if error is not None:
                if isinstance(error, _REPLACE):
                    await self.discard(f"{error.__class__.__name__}")
                raise error

    async def flush(self) -> None:
        """Wait until every record queued so far is acknowledged (or failed), bounded."""
        if self._producer is not None:
            await self._within(self._producer.flush(), "flush")

    async def metadata(self) -> None:
        """Ask the cluster for its metadata (a readiness probe), bounded."""
        producer = await self.start()
        await self._within(producer.client.fetch_all_metadata(), "metadata")

    async def discard(self, why: str) -> None:
        """Close the current producer now: what it has not sent fails with
        ``KafkaTimeoutError`` and is not sent later; the next send makes a new one."""
        producer, self._producer = self._producer, None
        if producer is not None:
            log.info("closing the Kafka producer (%s); the next send makes a new one", why)
            _fail_pending(producer, KafkaTimeoutError(f"producer closed: {why}"))
            await _close(producer, self.close_timeout_s)

    async def stop(self) -> None:
        """Deliver what is queued within ``close_timeout_s`` (the rest fails), then close."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        stopping = asyncio.ensure_future(producer.stop())
        done, _ = await asyncio.wait([stopping], timeout=self.close_timeout_s)
        if not done:
            log.warning(
                "Kafka producer: records not acknowledged within %g s are dropped on close",
                self.close_timeout_s,
            )
            _fail_pending(producer, KafkaTimeoutError("producer closed before delivery"))
            await _finish(stopping, self.close_timeout_s)

    async def _call(self, call: Callable[[AIOKafkaProducer], Awaitable[T]]) -> T:
        # (aiokafka bounds a send's own wait, for metadata or room, by its request
        # timeout: the delivery timeout unless ``options`` say otherwise)
        producer = await self.start()
        try:
            return await call(producer)
        except _REPLACE as exc:  # the record was not taken: a new producer takes it
            if self._producer is producer:
                await self.discard(exc.__class__.__name__)
            return await call(await self.start())

    async def _within(self, step: Awaitable[T], what: str) -> T:
        try:
            return await asyncio.wait_for(step, self.delivery_timeout_s)
        except TimeoutError:
            why = f"{what} took longer than {self.delivery_timeout_s:g} s"
            await self.discard(why)
            raise KafkaTimeoutError(why) from None


@functools.lru_cache(maxsize=1 << 16)  # a collector's GPUs come back every round
def _index(key: bytes, count: int) -> int:
    return int(murmur2(key) & 0x7FFFFFFF) % count


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _fail_pending(producer: AIOKafkaProducer, error: KafkaTimeoutError) -> None:
    """Fail every batch ``producer`` holds, queued or in flight, as the Java client's
    ``close(timeout)`` does: aiokafka has no public way (aio-libs/aiokafka#1101), so its
    accumulator's own ``fail_all`` (what its sender calls when it dies) is used.

    A batch the sender put back after a retriable error is queued again but no longer
    pending, and failing it runs its callback that removes it from the pending set: a
    ``KeyError`` logged once per batch (by aiokafka's own ``fail_all`` too). Such batches
    are marked pending again first; the producer is being closed, so nothing else reads
    the set.

    A request still in flight may end later in a retriable error, and the sender would
    then put its batch (failed, no longer pending) back: a ``KeyError`` that ends the
    sender with an error, whose own callback then fails too (``AttributeError`` from the
    idempotent producer's transaction manager). So the closing producer puts nothing
    back: nothing is sent again."""
    accumulator = producer._message_accumulator
    for batches in accumulator._batches.values():
        accumulator._pending_batches.update(b for b in batches if b.retry_count > 0)
    accumulator.fail_all(error)
    accumulator.reenqueue = lambda batch: None


async def _close(producer: AIOKafkaProducer, timeout_s: float) -> None:
    await _finish(asyncio.ensure_future(producer.stop()), timeout_s)


async def _finish(stopping: asyncio.Future[None], timeout_s: float) -> None:
    done, _ = await asyncio.wait([stopping], timeout=timeout_s)
    if not done:  # its requests in flight end by their own timeout; nothing is sent after
        log.info("a Kafka producer did not close within %g s; it finishes by itself", timeout_s)
    elif not stopping.cancelled() and stopping.exception() is not None:
        log.debug("Kafka producer close failed", exc_info=stopping.exception())
