"""Every contract model through a real Kafka broker, and an invalid message to its DLQ."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from pydantic import BaseModel

from gpusched.contracts import (
    CONTROL,
    JOBS,
    TELEMETRY,
    TOPICS,
    VIEW,
    ContractError,
    DeadLetter,
    GpuTelemetrySample,
    InvalidEvent,
    dead_letter,
    decode,
    encode,
)
from gpusched.contracts.producer import Producer
from tests.builders import every_event

pytestmark = pytest.mark.kafka


def _key(event: BaseModel) -> bytes:
    topic = next(t for t in TOPICS if t.model is type(event))
    return str(getattr(event, topic.key_field)).encode()


async def _consume(bootstrap: str, topics: list[str], count: int) -> list[tuple[str, bytes, bytes]]:
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    got: list[tuple[str, bytes, bytes]] = []
    try:
        async with asyncio.timeout(30):
            while len(got) < count:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got += [(r.topic, r.key or b"", r.value or b"") for r in records]
    finally:
        await consumer.stop()
    return got


async def test_every_model_round_trips_through_the_broker(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    events = every_event()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for event in events:
            topic = next(t for t in TOPICS if t.model is type(event))
            await producer.send_and_wait(topic.name(topic_prefix), encode(event), key=_key(event))
    finally:
        await producer.stop()

    received = await _consume(kafka_bootstrap, [t.name(topic_prefix) for t in TOPICS], len(events))
    decoded = []
    for topic_name, key, value in received:
        topic = next(t for t in TOPICS if t.name(topic_prefix) == topic_name)
        event = decode(topic.model, value)
        assert key == _key(event)
        decoded.append(event)
    assert sorted(decoded, key=repr) == sorted(events, key=repr)


async def test_invalid_message_goes_to_the_dlq_with_its_reason(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    good = every_event()[0]
    bad = encode(good).replace(b'"power_w":250.0', b'"power_w":"hot"')
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for value in (bad, encode(good)):
            await producer.send_and_wait(TELEMETRY.name(topic_prefix), value, key=b"GPU-0001")
        # What a consumer does with each message: decode, or dead-letter it with the reason.
        accepted: list[GpuTelemetrySample] = []
        rejected: list[ContractError] = []
        for topic, key, value in await _consume(kafka_bootstrap, [TELEMETRY.name(topic_prefix)], 2):
            try:
                accepted.append(decode(GpuTelemetrySample, value))
            except ContractError as exc:
                rejected.append(exc)
                record = dead_letter(topic, value, exc, key=key)
                await producer.send_and_wait(TELEMETRY.dlq(topic_prefix), encode(record), key=key)
    finally:
        await producer.stop()

    assert accepted == [good]
    assert [type(e) for e in rejected] == [InvalidEvent]
    ((_, _, dlq_value),) = await _consume(kafka_bootstrap, [TELEMETRY.dlq(topic_prefix)], 1)
    record = decode(DeadLetter, dlq_value)
    assert record.error_type == "InvalidEvent"
    assert "power_w='hot'" in record.error
    assert record.topic == TELEMETRY.name(topic_prefix)


async def test_topics_exist_under_the_prefix_with_their_cleanup_policy(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        names = set(await admin.list_topics())
        for topic in TOPICS:
            assert {topic.name(topic_prefix), topic.dlq(topic_prefix)} <= names
        policies = {}
        for topic in (VIEW, CONTROL, JOBS):
            (response,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic.name(topic_prefix))]
            )
            configs = response.resources[0][4]
            policies[topic] = next(c[1] for c in configs if c[0] == "cleanup.policy")
    finally:
        await admin.close()
    assert policies == {VIEW: "compact", CONTROL: "compact", JOBS: "delete"}


async def test_records_sent_in_batches_land_where_one_by_one_sends_put_them(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    """``Producer.send_many`` partitions keys as ``send`` (the default partitioner) does:
    a GPU's samples stay in one partition whichever way they were sent."""
    keys = [f"GPU-{i:04d}".encode() for i in range(200)]
    topic = TELEMETRY.name(topic_prefix)
    producer = Producer(kafka_bootstrap, max_batch_size=4096)  # batches fill: several a partition
    try:
        sent = [await producer.send(topic, b"one", key=key) for key in keys]
        sent += await producer.send_many(topic, [(key, b"batched") for key in keys])
        await producer.delivered(sent)
    finally:
        await producer.stop()
    placed: dict[bytes, dict[bytes, int]] = {b"one": {}, b"batched": {}}
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        async with asyncio.timeout(30):
            while sum(map(len, placed.values())) < 2 * len(keys):
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    for r in records:
                        placed[r.value or b""][r.key or b""] = tp.partition
    finally:
        await consumer.stop()
    assert len(set(placed[b"batched"].values())) > 1
    assert placed[b"batched"] == placed[b"one"]
