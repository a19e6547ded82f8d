"""Streaming pipeline throughput and latency on the real local broker.

- ``processor_samples_per_s`` / ``sink_samples_per_s``: 200,000 samples (10,000 GPUs x 20
  rounds, stamped this hour: the telemetry table drops rows past its 30-day TTL as they
  are inserted) are put on the telemetry topic first; then one sink and one processor
  worker (one Faust worker) drain them, in turn. The rate is read from each consumer
  group's committed offsets, from its first commit to its last, so start-up is not counted.
- ``sink_mixed_samples_per_s`` / ``sink_mixed_events_per_s``: last, a fresh sink group on
  all that the runs before left on the topics (the collector's samples after the 200,000,
  the node views and priorities of the processor runs), until its first 200,000 samples
  are committed: samples, and events of every topic, per second.
- ``..._vs_raw_consume_ratio``: against a bare aiokafka consumer that only decodes the same
  messages, measured in the same run.
- ``processor_samples_per_s_2_workers``: the same samples drained by two processor
  workers (two processes, a fresh app id) on this machine; ``processor_2_workers_vs_1_ratio``
  against one worker in the same run. Each decodes half the partitions and sends its
  parts of nodes to the merger, which one of the two also runs.
- ``telemetry_to_priority_p99_s``: a simulated collector at 10,000 GPUs x 1 Hz for 20 s, with
  the processor running; for every NodeView received, receive time minus the newest sample
  it reflects (``last_seen``, stamped when the sample was read). p50 too. Beside it,
  ``telemetry_on_topic_p99_s``: the same for one in ten of the samples themselves, read
  from the telemetry topic (what the collector and the broker alone take on this machine:
  the simulated collector stamps a round's 10,000 samples at once and takes most of a
  second to send them, where each node's own collector would send its 8 at once).
- ``telemetry_logged_to_view_p99_s``: the processor's part: for every NodeView, receive
  time minus when the broker appended the newest sample it reflects to the telemetry
  topic (the record's timestamp, LogAppendTime for this run; read by a second process).
  p50 too.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from gpusched.contracts import GpuTelemetrySample, NodeView, decode, encode
from gpusched.contracts.topics import TELEMETRY, VIEW
from gpusched.local.procs import gpusched_executable
from samples import telemetry_samples
from services import broker_and_prefix, quantile, start, stop

GPUS, ROUNDS = 10_000, 20
GPUSCHED = gpusched_executable()  # the collector runs to its end


async def _produce(bootstrap: str, topic: str, payloads: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    for key, value in payloads:
        await producer.send(topic, value, key=key)
    await producer.flush()
    await producer.stop()


async def _raw_rate(bootstrap: str, topic: str, total: int) -> float:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"raw-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
    )
    await consumer.start()
    seen, start = 0, 0.0
    while seen < total:
        for records in (await consumer.getmany(timeout_ms=500, max_records=20_000)).values():
            start = start or time.perf_counter()
            for record in records:
                decode(GpuTelemetrySample, record.value or b"")
            seen += len(records)
    rate = total / (time.perf_counter() - start)
    await consumer.stop()
    return rate


async def _group_rate(bootstrap: str, group: str, topic: str, total: int) -> float:
    """Samples per second between a group's first and last commit on ``topic``."""
    return (await _group_rates(bootstrap, group, topic, total))[0]


async def _group_rates(bootstrap: str, group: str, topic: str, total: int) -> tuple[float, float]:
    """(records of ``topic``, records of every topic) per second, between the group's first
    commit and the one that reaches ``total`` records of ``topic``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    first: tuple[float, int, int] | None = None
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            offsets = await admin.list_consumer_group_offsets(group)
            done = sum(o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset > 0)
            every = sum(o.offset for o in offsets.values() if o.offset > 0)
            now = time.perf_counter()
            if done and first is None:
                first = (now, done, every)
            if done >= total and first is not None:
                elapsed = now - first[0]
                return (done - first[1]) / elapsed, (every - first[2]) / elapsed
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{group} did not finish {total} samples")
    finally:
        await admin.close()


async def _latencies(
    bootstrap: str, prefix: str, seconds: float
) -> tuple[list[float], list[float], list[tuple[str, float, float]]]:
    """(node views: receive time minus the newest sample each reflects; the samples
    themselves on the telemetry topic: receive time minus their time; each view's node,
    newest sample time and receive time), read side by side."""
    views: list[tuple[str, float, float]] = []
    view_lags, raw_lags = await asyncio.gather(
        _lags(bootstrap, VIEW.name(prefix), seconds, NodeView, "last_seen", 1, views),
        _lags(bootstrap, TELEMETRY.name(prefix), seconds, GpuTelemetrySample, "ts", 10, []),
    )
    return view_lags, raw_lags, views


async def _lags(
    bootstrap: str, topic: str, seconds: float, model: type[NodeView | GpuTelemetrySample],
    field: str, every: int, seen: list[tuple[str, float, float]],
) -> list[float]:  # fmt: skip
    """Receive time minus ``field`` of every ``every``-th record (one in ten of the 10,000
    samples a second: decoding them all in this process delayed its reading of both
    topics, and counted as the pipeline's lag); each one's (node, stamp, receive time)
    appended to ``seen``."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="latest")
    await consumer.start()
    found: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            now = time.time()
            for record in records[::every]:
                event = decode(model, record.value or b"")
                stamp = getattr(event, field)
                # the collector's nodes (c*), not those of the samples drained before
                if stamp is not None and event.node_id.startswith("c"):
                    found.append(now - stamp.timestamp())
                    seen.append((event.node_id, stamp.timestamp(), now))
    await consumer.stop()
    return found


def _logged_times(bootstrap: str, topic: str, seconds: float) -> dict[tuple[str, float], float]:
    """In a process of its own (it decodes every sample): for each (node, sample time),
    when the first of those samples was appended to the topic's log (the record's
    timestamp: LogAppendTime)."""

    async def read() -> dict[tuple[str, float], float]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="latest")
        await consumer.start()
        logged: dict[tuple[str, float], float] = {}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    sample = decode(GpuTelemetrySample, record.value or b"")
                    key = (sample.node_id, sample.ts.timestamp())
                    logged[key] = min(logged.get(key, math.inf), record.timestamp / 1000)
        await consumer.stop()
        return logged

    return asyncio.run(read())


def _from_log(
    views: list[tuple[str, float, float]], logged: dict[tuple[str, float], float]
) -> list[float]:
    """Each view's receive time minus when the newest sample it reflects was logged."""
    return [seen - logged[node, stamp] for node, stamp, seen in views if (node, stamp) in logged]


async def _log_append_time(bootstrap: str, topic: str) -> None:
    """Stamp ``topic``'s records with the broker's append time rather than the producer's
    (the collector's loop holds a record it has queued for as long as it takes to queue
    the rest of its batch, which is the collector's time, not the processor's)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, topic, {"message.timestamp.type": "LogAppendTime"}
        )
        await admin.alter_configs([resource])
    finally:
        await admin.close()


def _sink_rates(
    bootstrap: str, prefix: str, env: dict[str, str], log: Path, total: int
) -> tuple[float, float]:
    """A fresh sink group's (samples, events of every topic) per second until its first
    ``total`` samples are committed."""
    group = f"{prefix}{env.get('GPUSCHED_SINK_GROUP_ID', 'gpusched-sink')}"
    sink = start(["sink"], env, log)
    try:
        return asyncio.run(_group_rates(bootstrap, group, TELEMETRY.name(prefix), total))
    finally:
        stop(sink)


def run() -> dict[str, float]:
    with broker_and_prefix() as (bootstrap, prefix):
        return _run(bootstrap, prefix)


def _run(bootstrap: str, prefix: str) -> dict[str, float]:
    topic = TELEMETRY.name(prefix)
    total = GPUS * ROUNDS
    payloads = [(s.gpu_uuid.encode(), encode(s)) for s in telemetry_samples(total, gpus=GPUS)]
    asyncio.run(_produce(bootstrap, topic, payloads))
    raw = asyncio.run(_raw_rate(bootstrap, topic, total))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "GPUSCHED_TOPIC_PREFIX": prefix,
            "GPUSCHED_STORE_DSN": f"chdb://{work / 'ch'}",
            "GPUSCHED_SINK_SQL_PORT": "0",
            "GPUSCHED_PROCESSOR_DATA_DIR": str(work / "proc"),
        }
        # the sink first, on the samples alone (as the processor below)
        sink_rate = _sink_rates(bootstrap, prefix, {**env, "GPUSCHED_SINK_GROUP_ID": "sink-1"},
                                work / "sink-1.log", total)[0]  # fmt: skip
        processor = start(["process"], env, work / "process.log")
        try:
            proc_rate = asyncio.run(
                _group_rate(bootstrap, f"{prefix}gpusched-processor-telemetry", topic, total)
            )
            asyncio.run(_log_append_time(bootstrap, topic))
            cluster = work / "c.cluster.csv"
            rows = [f"c{i:05d},V100,8,96000,786432" for i in range(GPUS // 8)]
            cluster.write_text("node_id,gpu_type,num_gpu,cpu_milli,memory_mib\n" + "\n".join(rows))
            collector = subprocess.Popen(
                [str(GPUSCHED), "collect", "--source", "simulated", "--cluster", str(cluster),
                 "--rounds", "25", "--interval", "1", "--speed", "1"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                logged = pool.submit(_logged_times, bootstrap, topic, 21.0)
                latencies, raw_lags, views = asyncio.run(_latencies(bootstrap, prefix, 20.0))
                from_log = _from_log(views, logged.result())
            collector.wait(timeout=120)
        finally:
            stop(processor)
        two = {**env, "GPUSCHED_PROCESSOR_APP_ID": "gpusched-processor-2w"}
        workers = [
            start(["process"], {**two, "GPUSCHED_PROCESSOR_DATA_DIR": str(work / f"p{i}")},
                  work / f"process-{i}.log")
            for i in range(2)
        ]  # fmt: skip
        try:
            two_rate = asyncio.run(
                _group_rate(bootstrap, f"{prefix}gpusched-processor-2w-telemetry", topic, total)
            )
        finally:
            for worker in workers:
                stop(worker)
        # last, on everything the runs above left: the collector's 250,000 samples after
        # these, the node views and priorities of three processor runs
        mixed_samples, mixed_events = _sink_rates(bootstrap, prefix, env, work / "sink.log", total)
    return {
        "processor_samples_per_s": proc_rate,
        "processor_samples_per_s_2_workers": two_rate,
        "processor_2_workers_vs_1_ratio": two_rate / proc_rate,
        "sink_samples_per_s": sink_rate,
        "sink_mixed_samples_per_s": mixed_samples,
        "sink_mixed_events_per_s": mixed_events,
        "raw_consume_decode_samples_per_s": raw,
        "processor_vs_raw_consume_ratio": proc_rate / raw,
        "sink_vs_raw_consume_ratio": sink_rate / raw,
        "telemetry_to_priority_p50_s": quantile(latencies, 0.5),
        "telemetry_to_priority_p99_s": quantile(latencies, 0.99),
        "telemetry_on_topic_p99_s": quantile(raw_lags, 0.99),
        "telemetry_logged_to_view_p50_s": quantile(from_log, 0.5),
        "telemetry_logged_to_view_p99_s": quantile(from_log, 0.99),
        "telemetry_to_priority_vs_on_topic_p99_ratio": (
            quantile(latencies, 0.99) / quantile(raw_lags, 0.99)
        ),
    }
