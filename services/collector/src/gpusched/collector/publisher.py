"""Publishing samples through a bounded buffer that survives outages: GPU samples to the
telemetry topic, readings of nodes without GPUs to the hosts topic.

``offer`` never blocks the sampling loop: samples wait in a buffer of at most ``capacity``;
when it is full the oldest are dropped and counted (``dropped``), and a warning says how
many. ``drain`` sends what is buffered; a batch the broker did not acknowledge goes back to
the front of the buffer and is retried on the next drain.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Iterable

from aiokafka.errors import KafkaError

from gpusched.contracts import GpuTelemetrySample, HostSample, encode
from gpusched.contracts.metrics import PRODUCED
from gpusched.contracts.producer import Producer
from gpusched.contracts.settings import KafkaSettings
from gpusched.contracts.topics import HOSTS, TELEMETRY, Topic

__all__ = ["TelemetryPublisher"]

log = logging.getLogger(__name__)


Sample = GpuTelemetrySample | HostSample


class TelemetryPublisher:
    """Buffer and send samples: a GPU's keyed by its UUID to the telemetry topic, a GPU-less
    node's keyed by node id to the hosts topic (both under ``prefix``)."""

    def __init__(
        self, kafka: KafkaSettings | str, prefix: str, capacity: int, batch_size: int = 5_000
    ) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.topics = {t.model: t for t in (TELEMETRY, HOSTS)}
        self.capacity = capacity
        self.batch_size = batch_size
        self.buffer: deque[Sample] = deque()
        self.sent = 0
        self.dropped = 0
        self.producer = Producer(
            kafka, delivery_timeout_s=10.0, linger_ms=20, max_batch_size=1 << 20
        )
        self._failing = False

    def offer(self, samples: Iterable[Sample]) -> None:
        """Queue samples; drop (and count) the oldest beyond capacity."""
        self.buffer.extend(samples)
        excess = len(self.buffer) - self.capacity
        if excess > 0:
            for _ in range(excess):
                self.buffer.popleft()
            self.dropped += excess
            log.warning(
                "telemetry buffer full (%d samples): dropped the %d oldest, %d dropped so far",
                self.capacity,
                excess,
                self.dropped,
            )

    async def drain(self) -> bool:
        """Send everything buffered; False if the broker could not be reached (kept buffered)."""
        try:
            while self.buffer:
                count = min(self.batch_size, len(self.buffer))
                batch = [self.buffer.popleft() for _ in range(count)]
                try:
                    await self._send(batch)
                except BaseException:
                    self.buffer.extendleft(reversed(batch))
                    raise
                self.sent += count
        except (KafkaError, OSError) as exc:
            if not self._failing:  # once per outage; the service's watcher says it too
                log.warning(
                    "telemetry not sent (%s); buffering up to %d samples until the broker is back",
                    exc.__class__.__name__,
                    self.capacity,
                )
            self._failing = True
            await self.producer.discard(f"telemetry not sent: {exc.__class__.__name__}")
            return False
        if self._failing:
            log.info("the broker takes telemetry again: %d samples sent so far", self.sent)
            self._failing = False
        return True

    async def _send(self, batch: list[Sample]) -> None:
        records: dict[Topic, list[tuple[bytes, bytes]]] = defaultdict(list)
        for s in batch:
            topic = self.topics[type(s)]
            records[topic].append((str(getattr(s, topic.key_field)).encode(), encode(s)))
        futures = []
        for topic, keyed in records.items():
            futures += await self.producer.send_many(topic.name(self.prefix), keyed)
        await self.producer.delivered(futures)
        for topic, keyed in records.items():
            PRODUCED.labels(topic=topic.base).inc(len(keyed))

    async def close(self) -> None:
        await self.producer.stop()

    def __len__(self) -> int:
        return len(self.buffer)
