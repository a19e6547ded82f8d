"""Folding a whole topic, from its first offset, into a service's in-memory state.

Services that rebuild what they know from a compacted or retained topic on every start
(the collector's occupancy, the forecaster's series) read it without a consumer group:
every partition from the start, then follow it. Invalid records are skipped here; the
sink dead-letters them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import BaseModel

from gpusched.contracts.codec import decode
from gpusched.contracts.errors import ContractError
from gpusched.contracts.settings import KafkaSettings, client_options

__all__ = ["follow_topic"]

log = logging.getLogger(__name__)
E = TypeVar("E", bound=BaseModel)


async def follow_topic(
    kafka: KafkaSettings | str,
    topic: str,
    model: type[E],
    apply: Callable[[E], None],
    caught_up: asyncio.Event,
) -> None:
    """Apply every valid record of ``topic`` (on the broker of ``kafka``: settings, or
    bootstrap servers without authentication) from its start, in partition order; set
    ``caught_up`` once what was there at start is applied. Runs until cancelled, and
    reconnects (from the start again: ``apply`` must be idempotent) when the broker goes,
    saying so once per outage (the health watcher reports the outage itself)."""
    warned = False
    while True:
        consumer = AIOKafkaConsumer(
            topic,
            **client_options(kafka),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )  # no group: every partition, from the start
        try:
            await consumer.start()
            ends: dict[TopicPartition, int] | None = None
            while True:
                batches = await consumer.getmany(timeout_ms=200)
                warned = warned and not batches  # records again: the next outage is news
                for records in batches.values():
                    for record in records:
                        try:
                            event = decode(model, record.value or b"")
                        except ContractError:
                            continue  # the sink dead-letters it; here it only has no effect
                        apply(event)
                if ends is None and consumer.assignment():
                    ends = await consumer.end_offsets(list(consumer.assignment()))
                if ends is not None and not caught_up.is_set():
                    positions = {tp: await consumer.position(tp) for tp in ends}
                    if all(positions[tp] >= end for tp, end in ends.items()):
                        caught_up.set()
        except (KafkaError, OSError) as exc:
            say = log.debug if warned else log.warning
            say("%s unreachable (%s); retrying", topic, exc.__class__.__name__)
            warned = True
            await asyncio.sleep(1.0)
        finally:
            await consumer.stop()
