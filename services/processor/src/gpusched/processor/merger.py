"""The processor's second stage: the one worker that merges the whole cluster.

It is the member of consumer group ``<app>-merger`` that Kafka gives the merge topic's
single partition. On assignment it reads the compacted topic from its beginning (the
latest part of every node, record of every job not forgotten, value of every parameter,
the last epoch) and only then publishes: node views, priorities from
``compute_priorities`` over the whole state, parameter reports and heartbeats. On
revocation (or a lost broker) it stops and drops the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from gpusched.contracts import ControlParameter, ControlStatus, JobEvent, encode
from gpusched.contracts.control import ControlRevision
from gpusched.contracts.metrics import BATCH_EVENTS, MERGING, PRODUCED, VIEW_LAG_SECONDS
from gpusched.contracts.topics import CONTROL_STATUS, PRIORITIES, VIEW
from gpusched.core import Params
from gpusched.processor.deltas import MERGED_BY, DeltaProducer, group_consumer
from gpusched.processor.priorities import compute_priorities
from gpusched.processor.records import (
    Delta,
    EndedJobs,
    JobRecord,
    NodeRecord,
    fold_job,
    job_key,
    newer_job,
)
from gpusched.processor.settings import ProcessorSettings
from gpusched.processor.view import LiveView

__all__ = ["CHECKPOINT", "Merger"]

CHECKPOINT = "m"  # the part tag of a node's whole record, written by the merger

log = logging.getLogger(__name__)


class Merger:
    """The whole-cluster state and what is published from it, while ``merging``."""

    def __init__(self, settings: ProcessorSettings, app_id: str, deltas: DeltaProducer) -> None:
        self.settings, self.app_id, self.deltas = settings, app_id, deltas
        self.view = LiveView(settings.processor_stale_after_s)
        self.records: dict[str, JobRecord] = {}
        self.ended = EndedJobs(settings.processor_ended_jobs_per_tenant)
        self.params = Params()
        self.control = ControlRevision("processor")
        self.allocated: dict[str, float] = {}
        self.epoch = 0
        self.published: dict[str, tuple[float, str | None]] = {}
        self.merging = False
        self.session: bytes | None = None  # new each time this worker starts merging
        self.checkpointed: dict[str, set[str]] = {}  # GPUs of each node's last checkpoint
        self._wanted = asyncio.Event()
        self._out = {
            t.base: t.name(settings.topic_prefix) for t in (VIEW, PRIORITIES, CONTROL_STATUS)
        }

    async def run(self) -> None:
        await self.deltas.ready()
        await self._run()

    async def _run(self) -> None:
        """Merge the deltas while this worker holds the merge topic's partition (its own
        consumer group: Kafka gives the partition to exactly one member and moves it on
        when that member dies). On taking it over, the state is rebuilt from the
        compacted topic's beginning before anything is published."""
        s, topic = self.settings, self.deltas.topic
        while True:
            ownership = _Ownership(self)
            consumer = group_consumer(s, self.app_id, "merger")
            consumer.subscribe([topic], listener=ownership)
            ownership.consumer = consumer
            try:
                await consumer.start()
                while True:
                    batches = await consumer.getmany(
                        timeout_ms=int(s.processor_flush_s * 1000), max_records=20_000
                    )
                    for records in batches.values():
                        BATCH_EVENTS.labels(consumer="merger").observe(len(records))
                        await self._fold(records)
                    await ownership.check_loaded()
                    await self.publish_readings()
            except (KafkaError, OSError) as exc:  # the watcher logs the outage once
                log.debug("merge consumer lost the broker (%s); reconnecting", exc)
                await asyncio.sleep(1.0)
            finally:
                self.step_down()
                await consumer.stop()

    def take_over(self) -> None:
        """Start from nothing: the merge topic is read again from its beginning."""
        self.view = LiveView(self.settings.processor_stale_after_s)
        self.records, self.published, self.allocated = {}, {}, {}
        self.checkpointed = {}
        self.ended = EndedJobs(self.settings.processor_ended_jobs_per_tenant)
        self.params = Params()

    def step_down(self) -> None:
        if self.merging:
            log.info("no longer merging the whole cluster's view")
        self.merging, self.session = False, None
        MERGING.set(0)
        self.take_over()  # frees the state

    def merged(self) -> None:
        self.merging, self.session = True, os.urandom(8)
        MERGING.set(1)
        self.view.dirty.update(self.view.nodes)  # every node's view again, as merged
        log.info(
            "merging the whole cluster's view (%d jobs, %d nodes)",
            len(self.records),
            len(self.view.nodes),
        )
        self._wanted.set()

    def merge_own(self, parts: list[NodeRecord]) -> bytes | None:
        """While this worker merges, fold its own node parts in straight away, before they
        go on the topic (and return the merge session they are sent with: read back, they
        are skipped). A single worker then decodes each of its parts once, and its views
        do not wait for the topic's round trip. None when it does not merge."""
        if not self.merging:
            return None
        for part in parts:
            self.view.merge(part)
        return self.session

    async def publish_readings(self) -> None:
        """The views of the nodes that have new readings; the whole record of a node
        whose set of GPUs grew, as its checkpoint."""
        if self.merging:
            changed = self.view.take_dirty()
            await self._checkpoint(changed)
            await self._publish_views([n.node_id for n in changed], readings=True)

    async def _checkpoint(self, nodes: list[NodeRecord]) -> None:
        """Write each node whose GPUs are not all in its last checkpoint to the topic
        whole (``node:<id>:m``). A worker's part of a node holds only the GPUs it has read:
        after a telemetry partition moves, its new owner's part lacks a GPU that has gone
        silent, and compaction drops the old part; the checkpoint keeps that GPU in the
        rebuilt view, stale, as the merger that saw it had it. Rare: only when GPUs
        appear."""
        grown = [
            n
            for n in nodes
            if n.gpus and not n.gpus.keys() <= self.checkpointed.get(n.node_id, set())
        ]
        for node in grown:
            self.checkpointed[node.node_id] = set(node.gpus)
        if grown:
            await self.deltas.send_all(Delta(node=n, part=CHECKPOINT) for n in grown)

    async def _fold(self, records: list[Any]) -> None:
        unreadable = 0
        for record in records:
            if record.value is None:  # a tombstone: a job forgotten
                self.records.pop(record.key.decode().split(":", 1)[1], None)
                continue
            if self.session is not None and (MERGED_BY, self.session) in record.headers:
                continue  # this worker's own part, merged when it was sent
            try:
                delta = Delta.model_validate_json(record.value)
            except ValidationError:  # not from a gpusched worker, or a later version
                unreadable += 1
                continue
            if delta.node is not None:
                self.view.merge(delta.node)
                if delta.part == CHECKPOINT:
                    self.checkpointed[delta.node.node_id] = set(delta.node.gpus)
            elif delta.event is not None:
                await self._fold_event(delta.event)
            elif delta.job is not None:
                await self._merge_job(delta.job)
            elif delta.parameter is not None:
                await self._apply(delta.parameter)
            elif delta.epoch is not None:
                self.epoch = max(self.epoch, delta.epoch)
            else:
                log.warning("merge topic: an empty delta under %r", record.key)
        if unreadable:  # a node's next reading replaces a lost part
            log.warning("merge topic: skipped %d deltas this version cannot read", unreadable)

    async def _fold_event(self, event: JobEvent) -> None:
        """A job event folded into its record; the record goes on the topic too (the
        compacted topic keeps only a job's last event, so its record is its state)."""
        before = self.records.get(event.job_id)
        after = fold_job(before, event)
        if after is None or after == before:
            return
        await self._keep(after)
        if self.merging:
            await self.deltas.send(Delta(job=after))

    async def _merge_job(self, incoming: JobRecord) -> None:
        """A record read back from the topic (while loading: an event's fold may be on
        it already, or be further on)."""
        before = self.records.get(incoming.job_id)
        after = newer_job(before, incoming)
        if after != before:  # its own record read back changes nothing
            await self._keep(after)

    async def _keep(self, after: JobRecord) -> None:
        self.records[after.job_id] = after
        if after.state == "ended":
            for job_id in self.ended.add(after):
                await self._forget(job_id)
        self._wanted.set()

    async def _forget(self, job_id: str) -> None:
        """Drop an ended job beyond the per-tenant limit, from the cache and, with a
        tombstone, from the merge topic."""
        self.records.pop(job_id, None)
        self.published.pop(job_id, None)
        if self.merging:  # while loading, its tombstone may be further on already
            await self.deltas.forget(job_key(job_id))
            await self.deltas.forget(f"event:{job_id}".encode())

    async def _apply(self, parameter: ControlParameter) -> None:
        self.set_param(parameter.name, parameter.value)
        self.control.revision = max(self.control.revision, parameter.revision)
        if not self.merging:
            return  # loading: applied and reported when it was first merged
        log.info(
            "parameter %s = %r (revision %d, by %s)",
            parameter.name,
            parameter.value,
            parameter.revision,
            parameter.set_by,
        )
        await self.report(self.control.applied(parameter))
        self._wanted.set()

    async def report(self, status: ControlStatus) -> None:
        await self.deltas.publish(
            self._out[CONTROL_STATUS.base], status.service.encode(), encode(status)
        )

    async def heartbeat(self) -> None:
        if self.merging:
            await self.report(self.control.heartbeat())

    def set_param(self, name: str, value: float | bool | str) -> None:
        self.params = self.params.with_setting(name, value)

    async def _publish_views(self, node_ids: list[str], readings: bool = False) -> None:
        """Each node's view. Every loop that publishes stops once this worker has stepped
        down (a rebalance while it awaits a send), and reads the state it started with.
        ``readings``: published for new readings, so their lag is measured (not for a node
        gone stale, or a change of allocation)."""
        now, live, allocated = time.time(), self.view, self.allocated
        topic = self._out[VIEW.base]
        for node_id in node_ids:
            if not self.merging:
                return
            view = live.node_view(node_id, now, allocated.get(node_id, 0.0))
            if readings and view.last_seen is not None:
                VIEW_LAG_SECONDS.observe(max(now - view.last_seen.timestamp(), 0.0))
            await self.deltas.publish(topic, node_id.encode(), encode(view))
        PRODUCED.labels(topic=VIEW.base).inc(len(node_ids))

    async def stale_check(self) -> None:
        if not self.merging:
            return
        changed = self.view.newly_stale(time.time())
        if changed:
            await self._publish_views(changed)
            self._wanted.set()

    async def priorities(self) -> None:
        """Recompute when something changed (at most every min_recompute_s) and on a timer."""
        s = self.settings
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), s.processor_priority_interval_s)
            self._wanted.clear()
            started = time.monotonic()
            if self.merging:
                await self.publish_priorities()
            await asyncio.sleep(max(s.processor_min_recompute_s - (time.monotonic() - started), 0))

    async def publish_priorities(self) -> int:
        """Compute every job's priority now and publish those that changed."""
        self.epoch += 1
        result = compute_priorities(
            self.records.values(),
            self.view.nodes.values(),
            self.params,
            self.settings.processor_policy,
            time.time(),
            self.epoch,
            self.control.revision,
        )
        topic = self._out[PRIORITIES.base]
        sent, published, records = 0, self.published, self.records
        for update in result.updates:
            if not self.merging:
                return sent
            seen = (round(update.score, 6), update.pending_reason)
            if published.get(update.job_id) == seen:
                continue
            published[update.job_id] = seen
            await self.deltas.publish(topic, update.job_id.encode(), encode(update))
            sent += 1
        PRODUCED.labels(topic=PRIORITIES.base).inc(sent)
        await self.deltas.send(Delta(epoch=self.epoch))
        for job_id in [j for j, r in records.items() if r.state == "ended"]:
            published.pop(job_id, None)
        if not self.merging:
            return sent
        changed = [n for n, a in result.allocated.items() if self.allocated.get(n) != a]
        self.allocated = result.allocated
        if changed:
            await self._publish_views(changed)
        return sent


class _Ownership(ConsumerRebalanceListener):  # type: ignore[misc]
    """Whether this worker holds the merge partition: on assignment it rebuilds the
    state from the topic's beginning and merges once it has read up to the end offset
    of that moment; on revocation it stops."""

    def __init__(self, merger: Merger) -> None:
        self.merger = merger
        self.consumer: AIOKafkaConsumer | None = None
        self.loading: dict[TopicPartition, int] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.loading = {}
        self.merger.step_down()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if not assigned:
            return
        assert self.consumer is not None
        self.merger.take_over()
        await self.consumer.seek_to_beginning(*assigned)
        self.loading = await self.consumer.end_offsets(list(assigned))

    async def check_loaded(self) -> None:
        """Start merging once every assigned partition has been read up to its end."""
        if not self.loading:
            return
        assert self.consumer is not None
        for tp, end in self.loading.items():
            if await self.consumer.position(tp) < end:
                return
        self.loading = {}
        self.merger.merged()
