"""The processor: Faust workers that keep the live view and job table and publish priorities.

It runs as one worker or several, in two stages (docs/architecture.md, "The processor's
two stages"):

1. **Every worker**, for the partitions Kafka gives it: decodes telemetry and host
   readings in batches (dead-lettering what it cannot read) into its *parts* of the
   nodes (what it has read of a node on one input partition: samples are keyed by GPU,
   so a node's GPUs are spread over partitions), decodes and checks job events and
   control parameters, and sends what changed as deltas (``Delta``) to the internal,
   compacted, single-partition merge topic.
2. **One worker**, the member of the ``-merger`` consumer group that Kafka gives the
   merge topic's partition, folds the deltas into the whole cluster's view and job table,
   publishes node views and priorities, reports parameters and heartbeats and marks
   stale GPUs. When it dies, the partition moves to another worker, which reads the
   compacted topic from its beginning (the latest part of every node, record of every
   job not forgotten, value of every parameter) before it publishes anything.

Telemetry arrives through a batched aiokafka consumer that the app runs as a Faust task:
Faust's per-event stream path measured ~14,000 samples/s on the project machines against
~130,000/s batched. A batch's offsets are committed only after its deltas are
acknowledged, so a crash sends them again rather than losing them (the merger applies a
job event once, and keeps the newest reading of a GPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faust
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from gpusched.contracts import (
    ContractError,
    ControlParameter,
    JobEvent,
    dead_letter_for,
    decode,
)
from gpusched.contracts.control import HEARTBEAT_S
from gpusched.contracts.health import HealthServer, kafka_dependency, watch_kafka
from gpusched.contracts.logs import logging_config
from gpusched.contracts.metrics import BATCH_EVENTS, CONSUMED, DEAD_LETTERED
from gpusched.contracts.topics import (
    CONTROL,
    HOSTS,
    JOBS,
    TELEMETRY,
    Topic,
    topic_for,
)
from gpusched.core import CoreError, Params
from gpusched.processor.deltas import DeltaProducer, group_consumer
from gpusched.processor.merger import Merger
from gpusched.processor.records import Delta
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
        self.app = faust.App(
            app_id,  # Faust runs the tasks and timers; the consumers are aiokafka's
            broker=f"kafka://{settings.kafka_bootstrap_servers}",
            datadir=str(settings.processor_data_dir / app_id),
            web_enabled=False,
            broker_credentials=_credentials(settings),
            **_static_member(settings),
        )
        app = self.app
        # what this worker has read of each node, per input partition ("t3": telemetry 3)
        self.parts: dict[str, LiveView] = {}
        self.deltas = DeltaProducer(settings, f"{app_id}-merge")
        app.on_before_shutdown.connect(self.deltas.stop)
        # stage 2: the merger's state, rebuilt from the merge topic when it takes over
        self.merger = Merger(settings, app_id, self.deltas)
        app.task(self._telemetry)
        app.task(self._jobs)
        app.task(self.merger.run)
        app.task(self.merger.priorities)
        app.timer(1.0)(self.merger.stale_check)
        app.timer(HEARTBEAT_S)(self.merger.heartbeat)
        self.event_log = kafka_dependency(settings, log)
        app.task(self._watch_kafka)

    # -- stage 1: every worker, for its partitions ---------------------------------------
    async def _consume(self, topics: list[Topic], role: str, handle: Any) -> None:
        """Consume ``topics`` in group ``<app>-<role>`` in batches; ``handle`` each batch
        (it queues the batch's deltas). A batch's offsets are committed once its deltas
        are acknowledged, by a task of its own while the next batch is read and handled
        (waiting for both took 0.1-0.4 s a batch on a loaded broker, and held the next
        one back); commits keep the batches' order."""
        await self.deltas.ready()
        s = self.settings
        while True:
            names = (t.name(self.prefix) for t in topics)
            consumer = group_consumer(s, self.app_id, role, *names)
            committing: asyncio.Task[None] | None = None
            try:
                await consumer.start()
                while True:
                    batches = await consumer.getmany(
                        timeout_ms=int(s.processor_flush_s * 1000), max_records=20_000
                    )
                    if committing is not None and committing.done():
                        committing.result()  # a commit's KafkaError: reconnect
                    if batches:
                        events = sum(len(records) for records in batches.values())
                        BATCH_EVENTS.labels(consumer=role).observe(events)
                        await handle(batches)
                        offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
                        committing = asyncio.create_task(
                            self._commit(consumer, offsets, after=committing)
                        )
            except (KafkaError, OSError) as exc:  # the watcher logs the outage once
                log.debug("%s consumer lost the broker (%s); reconnecting", role, exc)
                await asyncio.sleep(1.0)
            finally:
                if committing is not None:  # not committed: read again, which is harmless
                    committing.cancel()
                    await asyncio.gather(committing, return_exceptions=True)
                await consumer.stop()

    async def _commit(
        self, consumer: Any, offsets: dict[Any, int], after: asyncio.Task[None] | None
    ) -> None:
        """Commit ``offsets`` once the commit ``after`` is done and every delta queued so
        far is acknowledged. A partition that has moved to another worker meanwhile is
        not committed: its new owner reads the batch again (deltas are keyed, events
        applied once)."""
        if after is not None:
            await after
        await self.deltas.flush()
        still = consumer.assignment()
        mine = {tp: offset for tp, offset in offsets.items() if tp in still}
        if not mine:
            return
        try:
            await consumer.commit(mine)
        except (CommitFailedError, IllegalStateError) as exc:
            log.debug("a batch's offsets not committed (%s): its partitions moved", exc)

    async def _telemetry(self) -> None:
        await self._consume([TELEMETRY, HOSTS], "telemetry", self._ingest)

    async def _jobs(self) -> None:
        await self._consume([JOBS, CONTROL], "jobs", self._forward)

    async def _forward(self, batches: dict[Any, list[Any]]) -> None:
        """Job events and control parameters, checked, to the merger (which folds them:
        they are few, and folding needs every job's record)."""
        for tp, records in batches.items():
            topic = topic_for(tp.topic, self.prefix)
            CONSUMED.labels(topic=topic.base).inc(len(records))
            for record in records:
                delta = await self._checked(topic, record)
                if delta is not None:
                    await self.deltas.send(delta)

    async def _checked(self, topic: Topic, record: Any) -> Delta | None:
        """The delta of a job event or control parameter; None when it was dead-lettered
        (unreadable; a parameter of unknown name or out of bounds, also reported)."""
        try:
            if topic is JOBS:
                return Delta(event=decode(JobEvent, record.value or b""))
            parameter = decode(ControlParameter, record.value or b"")
        except ContractError as exc:
            await self._dead_letter(topic, record, exc)
            return None
        try:
            Params().with_setting(parameter.name, parameter.value)
        except CoreError as exc:  # the API checks bounds too; a direct writer may not
            await self._dead_letter(topic, record, exc)
            await self.merger.report(self.merger.control.rejected(parameter, exc))
            return None
        return Delta(parameter=parameter)

    async def _dead_letter(self, topic: Topic, record: Any, error: Exception) -> None:
        dead = dead_letter_for(record, error)
        if topic not in (TELEMETRY, HOSTS):  # a flood of bad samples is counted, not logged
            log.warning("dead-lettered %s@%s: %s", record.topic, record.offset, error)
        await self.deltas.publish(topic.dlq(self.prefix), b"", dead.model_dump_json().encode())
        DEAD_LETTERED.labels(topic=topic.dlq()).inc()

    async def _ingest(self, batches: dict[Any, list[Any]]) -> None:
        """Fold one batch into this worker's parts of the nodes it touches and send each
        changed part to the merger (queued: ``_commit`` waits for them); when this worker
        is the merger, it folds them in itself first and publishes their views."""
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
                    await self._dead_letter(topic, record, exc)
        changed = [(t, n) for t, part in self.parts.items() for n in part.take_dirty()]
        session = self.merger.merge_own([n for _, n in changed])
        await self.deltas.send_all((Delta(node=n, part=t) for t, n in changed), merged_by=session)
        await self.merger.publish_readings()

    async def _watch_kafka(self) -> None:
        await watch_kafka(self.settings, self.event_log)


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
