"""The processor: Faust workers that keep the live view and job table and publish priorities.

It runs as one worker or several, in two stages (docs/architecture.md, "The processor's
two stages"):

1. **Every worker**, for the partitions Kafka gives it: decodes telemetry and host
   readings in batches (dead-lettering what it cannot read) into its *parts* of the
   nodes (what it has read of a node on one input partition: samples are keyed by GPU,
   so a node's GPUs are spread over partitions), folds job events into the ``jobs``
   table (a Faust table co-partitioned with the jobs topic; a job leaves it when it
   ends), checks control parameters, and sends what changed as deltas (``Delta``) to the
   internal, compacted, single-partition merge topic.
2. **One worker**, the member of the ``-merger`` consumer group that Kafka gives the
   merge topic's partition, folds the deltas into the whole cluster's view and job table,
   publishes node views and priorities, reports parameters and heartbeats and marks
   stale GPUs. When it dies, the partition moves to another worker, which reads the
   compacted topic from its beginning (the latest part of every node, record of every
   job not forgotten, value of every parameter) before it publishes anything.

Telemetry arrives through a batched aiokafka consumer that the app runs as a Faust task:
Faust's per-event stream path measured ~14,000 samples/s on the project machines against
~130,000/s batched. A batch's offsets are committed only after its deltas are
acknowledged; a job event's delta is acknowledged before the table entry is written, so a
crash sends it again rather than losing it (the merger keeps the newer record of two).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from gpusched.contracts import (
    ContractError,
    ControlParameter,
    JobEvent,
    dead_letter,
    dead_letter_for,
    decode,
)
from gpusched.contracts.control import HEARTBEAT_S
from gpusched.contracts.health import HealthServer, kafka_dependency, watch_kafka
from gpusched.contracts.logs import logging_config
from gpusched.contracts.metrics import CONSUMED, DEAD_LETTERED
from gpusched.contracts.provision import declared_partitions
from gpusched.contracts.topics import (
    CONTROL,
    HOSTS,
    JOBS,
    TELEMETRY,
    Topic,
    topic_for,
)
from gpusched.core import CoreError, Params
from gpusched.processor.merger import Merger
from gpusched.processor.records import (
    Delta,
    JobRecord,
    fold_job,
)
from gpusched.processor.settings import ProcessorSettings
from gpusched.processor.view import LiveView

__all__ = ["Processor"]

log = logging.getLogger(__name__)


class Processor:
    """Builds the Faust app for ``settings``; ``app`` is what a Faust worker runs."""

    def __init__(self, settings: ProcessorSettings) -> None:
        self.settings = settings
        prefix = settings.topic_prefix
        self.prefix = prefix
        self.app_id = app_id = f"{prefix}{settings.processor_app_id}"
        job_partitions = declared_partitions(JOBS.base)
        self.app = faust.App(
            app_id,
            broker=f"kafka://{settings.kafka_bootstrap_servers}",
            store="memory://",
            datadir=str(settings.processor_data_dir / app_id),
            topic_partitions=job_partitions,
            key_serializer="json",  # the jobs table's changelog; the topics are raw bytes
            value_serializer="json",
            web_enabled=False,
            broker_credentials=_credentials(settings),
            broker_session_timeout=6.0,  # a killed worker's partitions move on within seconds
            broker_heartbeat_interval=2.0,
            producer_linger=0.005,
            **_static_member(settings),
        )
        app = self.app
        # stage 1: the jobs of this worker's partitions that have not ended
        self.jobs = app.Table("jobs", partitions=job_partitions)
        self.merge_topic = app.topic(
            f"{app_id}-merge",
            partitions=1,
            internal=True,  # Faust creates it
            compacting=True,  # the latest delta of each key: the merger's state
            key_serializer="raw",
            value_serializer="raw",
        )
        # what this worker has read of each node, per input partition ("t3": telemetry 3)
        self.parts: dict[str, LiveView] = {}
        # stage 2: the merger's state, rebuilt from the merge topic when it takes over
        self.merger = Merger(settings, app_id, app, self.merge_topic)
        self._dlq = {t.base: self._topic(t.dlq(prefix)) for t in (TELEMETRY, HOSTS, JOBS, CONTROL)}
        app.agent(self._topic(JOBS.name(prefix)), name="jobs")(self._on_jobs)
        app.agent(self._topic(CONTROL.name(prefix)), name="control")(self._on_control)
        app.task(self._telemetry)
        app.task(self._merge)
        app.task(self.merger.priorities)
        app.timer(1.0)(self.merger.stale_check)
        app.timer(HEARTBEAT_S)(self.merger.heartbeat)
        self.event_log = kafka_dependency(settings, log)
        app.task(self._watch_kafka)

    def _topic(self, name: str) -> Any:
        return self.app.topic(name, key_serializer="raw", value_serializer="raw")

    async def _topics_ready(self) -> None:
        """Until the first recovery is done, and the merge topic exists."""
        tables: Any = self.app.tables  # the TableManager's recovery is not in its type
        await tables.recovery.completed.wait()
        await self.merge_topic.maybe_declare()  # created once (Faust's internal topic)

    # -- stage 1: every worker, for its partitions ---------------------------------------
    async def _send_delta(self, delta: Delta) -> Any:
        """Queue ``delta`` for the merger; the future resolves when it is acknowledged."""
        return await self.merge_topic.send(key=delta.key(), value=delta.model_dump_json().encode())

    async def _on_jobs(self, stream: Any) -> None:
        async for event in stream.events():
            CONSUMED.labels(topic=JOBS.base).inc()
            try:
                job_event = decode(JobEvent, event.value)
            except ContractError as exc:
                await self._dead_letter(JOBS, event, exc)
                continue
            stored = self.jobs.get(job_event.job_id)
            before = JobRecord.model_validate(stored) if stored is not None else None
            after = fold_job(before, job_event)
            if after is None or after == before:
                continue
            await (await self._send_delta(Delta(job=after)))  # acknowledged before stored
            if after.state == "ended":
                del self.jobs[after.job_id]  # the merger keeps the ended ones it needs
            else:
                self.jobs[after.job_id] = after.model_dump(mode="json")

    async def _on_control(self, stream: Any) -> None:
        async for event in stream.events():
            try:
                parameter = decode(ControlParameter, event.value)
                Params().with_setting(parameter.name, parameter.value)  # a known name, in bounds
            except ContractError as exc:
                await self._dead_letter(CONTROL, event, exc)
                continue
            except CoreError as exc:  # the API checks bounds too; a direct writer may not
                await self._dead_letter(CONTROL, event, exc)
                await self.merger.report(self.merger.control.rejected(parameter, exc))
                continue
            await (await self._send_delta(Delta(parameter=parameter)))

    async def _telemetry(self) -> None:
        await self._topics_ready()
        prefix, s = self.prefix, self.settings
        while True:
            consumer = AIOKafkaConsumer(
                TELEMETRY.name(prefix),
                HOSTS.name(prefix),
                **s.client_options(),
                group_id=f"{self.app_id}-telemetry",
                **s.group_options("telemetry"),
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_partition_fetch_bytes=8 << 20,
                session_timeout_ms=6_000,
                heartbeat_interval_ms=2_000,
            )
            try:
                await consumer.start()
                while True:
                    batches = await consumer.getmany(
                        timeout_ms=int(s.processor_flush_s * 1000), max_records=20_000
                    )
                    if batches:
                        await self._ingest(batches)
                        await consumer.commit()
            except (KafkaError, OSError) as exc:  # the watcher logs the outage once
                log.debug("telemetry consumer lost the broker (%s); reconnecting", exc)
                await asyncio.sleep(1.0)
            finally:
                await consumer.stop()

    async def _ingest(self, batches: dict[Any, list[Any]]) -> None:
        """Fold one batch into this worker's parts of the nodes it touches and send each
        changed part to the merger; returns once they are acknowledged."""
        for tp, records in batches.items():
            topic = topic_for(tp.topic, self.prefix)
            CONSUMED.labels(topic=topic.base).inc(len(records))
            part = self.parts.setdefault(
                f"{'h' if topic is HOSTS else 't'}{tp.partition}",
                LiveView(self.settings.processor_stale_after_s),
            )
            observe: Callable[[Any], None] = part.observe_host if topic is HOSTS else part.observe
            for record in records:
                try:
                    observe(decode(topic.model, record.value or b""))
                except ContractError as exc:
                    dead = dead_letter_for(record, exc)
                    await self._dlq[topic.base].send(value=dead.model_dump_json().encode())
                    DEAD_LETTERED.labels(topic=topic.dlq()).inc()
        for tag, part in self.parts.items():
            for node in part.take_dirty():
                await self._send_delta(Delta(node=node, part=tag))
        await self.app.producer.flush()

    # -- stage 2: the merger -------------------------------------------------------------
    async def _merge(self) -> None:
        await self._topics_ready()
        await self.merger.run()

    async def _watch_kafka(self) -> None:
        await watch_kafka(self.settings, self.event_log)

    async def _dead_letter(self, topic: Topic, event: Any, error: Exception) -> None:
        message = event.message
        record = dead_letter(
            message.topic,
            event.value if isinstance(event.value, bytes) else b"",
            error,
            key=event.key if isinstance(event.key, bytes) else None,
            partition=message.partition,
            offset=message.offset,
        )
        log.warning("dead-lettered %s@%s: %s", message.topic, message.offset, error)
        await self._dlq[topic.base].send(value=record.model_dump_json().encode())
        DEAD_LETTERED.labels(topic=topic.dlq()).inc()


def _credentials(settings: ProcessorSettings) -> faust.SASLCredentials | None:
    """Faust's form of the SASL settings (the aiokafka clients take client_options)."""
    options = settings.client_options()
    if "sasl_mechanism" not in options:
        return None
    return faust.SASLCredentials(
        username=options["sasl_plain_username"],
        password=options["sasl_plain_password"],
        ssl_context=options.get("ssl_context"),
        mechanism=options["sasl_mechanism"],
    )


def _static_member(settings: ProcessorSettings) -> dict[str, Any]:
    """Faust's form of the static membership option (its tables' consumer group)."""
    member = settings.group_options("faust").get("group_instance_id")
    return {"consumer_group_instance_id": member} if member else {}


def run_worker(settings: ProcessorSettings, loglevel: str = "info") -> None:
    """Run one Faust worker until it is stopped (SIGINT/SIGTERM)."""
    from faust.worker import Worker

    processor = Processor(settings)
    Path(processor.app.conf.datadir).mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if settings.health_port:
            deps = [processor.event_log]
            stack.enter_context(HealthServer("processor", deps, settings.health_port))
        Worker(
            processor.app, loglevel=loglevel, quiet=True, logging_config=logging_config(loglevel)
        ).execute_from_commandline()
