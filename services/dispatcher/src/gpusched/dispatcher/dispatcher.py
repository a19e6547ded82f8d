"""The dispatcher's state and what it does with each event it hears of.

A ``Dispatcher`` holds the core ``Scheduler`` and connects it to the topics and the
backend. Its handlers are named for what they handle: job events from the topic while
rebuilding (``on_recorded_job_event``) and once live (``on_job_event``), the backend's
own events (``on_backend_event``), the processor's live view (``on_node_view``) and
priorities (``on_priority``), and control parameters (``on_control``). The cycle that
turns the state into decisions is in ``gpusched.dispatcher.cycle``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpusched.contracts import (
    ControlParameter,
    ControlStatus,
    JobEvent,
    JobEventType,
    NodeView,
    PriorityUpdate,
    encode,
)
from gpusched.contracts.control import HEARTBEAT_S, ControlRevision
from gpusched.contracts.convert import job_request, submitted_job
from gpusched.contracts.producer import Producer
from gpusched.contracts.topics import CONTROL_STATUS, JOBS
from gpusched.core import CoreError, InvalidDecision, JobState, PowerState, Scheduler, held_on
from gpusched.dispatcher.backend import (
    Backend,
    BackendError,
    BackendEvent,
    JobArrived,
    JobStep,
    NodePower,
)
from gpusched.dispatcher.outlook import LiveOutlook
from gpusched.dispatcher.settings import DispatcherSettings

__all__ = ["Dispatcher", "DispatcherStats"]

log = logging.getLogger(__name__)


@dataclass
class DispatcherStats:
    applied: int = 0  # decisions carried out by the backend
    refused: int = 0  # decisions the backend refused (state out of date)
    recorded: int = 0  # backend events written to the jobs topic


@dataclass
class Dispatcher:
    """The scheduler and what connects it to the topics and the backend."""

    settings: DispatcherSettings
    backend: Backend
    producer: Producer
    scheduler: Scheduler
    epoch: int
    log_id: str
    outlook: LiveOutlook
    seq_done: int = 0
    stats: DispatcherStats = field(default_factory=DispatcherStats)
    wanted: asyncio.Event = field(default_factory=asyncio.Event)
    decisions_made: int = 0
    _meta: dict[str, tuple[str, str]] = field(default_factory=dict)  # job -> tenant, class
    _recorded: dict[str, JobEventType] = field(default_factory=dict)  # last step on the topic
    unhealthy: set[str] = field(default_factory=set)  # nodes the live view says are not
    priorities: asyncio.Queue[PriorityUpdate] = field(default_factory=asyncio.Queue)
    control: ControlRevision = field(default_factory=lambda: ControlRevision("dispatcher"))
    control_statuses: asyncio.Queue[ControlStatus] = field(default_factory=asyncio.Queue)

    @property
    def prefix(self) -> str:
        return self.settings.topic_prefix

    def event_id(self, seq: int) -> str:
        return f"{self.backend.name}-{self.log_id}-{seq}"

    def is_own_record(self, event: JobEvent) -> bool:
        """Recorded from this backend's log (not sent by a user or integrator)."""
        return event.event_id.startswith(f"{self.backend.name}-{self.log_id}-")

    # -- jobs -----------------------------------------------------------------------------
    def _submit(self, event: JobEvent, now: float) -> None:
        if event.job_id in self.scheduler.jobs:
            return  # a replayed submission
        self.scheduler.submit(submitted_job(event), now)
        self._meta[event.job_id] = (event.tenant, event.priority_class)
        self.wanted.set()

    def _step(
        self,
        job_id: str,
        kind: JobEventType,
        node_ids: tuple[str, ...],
        gpu_indices: tuple[tuple[int, ...], ...],
        now: float,
    ) -> None:
        """A job's step as the cluster (or the record of it) reports it."""
        s = self.scheduler
        job = s.jobs.get(job_id)
        if job is None or job.state is JobState.FINISHED:
            return
        running = job_id in s.running
        if kind.holds_gpus and not running and job_id in s.queue:
            try:
                s.assume(job_id, held_on(job.request, node_ids, gpu_indices), now)
            except InvalidDecision as exc:
                log.warning("job %s runs where the scheduler has no room: %s", job_id, exc)
        elif kind.requeues and running:
            s.requeue(job_id, now)
        elif kind.ends and running and kind is not JobEventType.CANCELLED:
            s.finish(job_id, now)  # feeds the run-time predictor
        elif kind.ends:
            s.cancel(job_id, now)
        self.wanted.set()

    def on_recorded_job_event(self, event: JobEvent) -> None:
        """A job event read back from the topic while rebuilding."""
        self._recorded[event.job_id] = event.type
        now = event.ts.timestamp()
        if event.type is JobEventType.SUBMITTED:
            self._submit(event, now)
        else:
            self._step(event.job_id, event.type, event.node_ids, event.gpu_indices, now)
        if self.is_own_record(event):
            seq = int(event.event_id.rsplit("-", 1)[1])
            self.seq_done = max(self.seq_done, seq)

    def on_job_event(self, event: JobEvent) -> None:
        """A job event from the topic once rebuilt: submissions and cancellations from
        users; lifecycle steps the backend reported are applied when it reports them."""
        now = time.time()
        if event.type is JobEventType.SUBMITTED:
            self._submit(event, now)
        elif event.type is JobEventType.CANCELLED and not self.is_own_record(event):
            if event.job_id in self.scheduler.running:  # the backend reports it cancelled
                asyncio.get_running_loop().create_task(self.backend.cancel(event.job_id))
            else:
                self._step(event.job_id, event.type, (), (), now)

    # -- the processor and the operators ---------------------------------------------------
    def on_node_view(self, node: NodeView) -> None:
        """The processor's live view: an unhealthy node (uncorrected ECC errors, all GPUs
        stale) gets no new work until it is healthy again."""
        if node.node_id not in self.scheduler.state.nodes:
            return
        if node.healthy and node.node_id in self.unhealthy:
            self.unhealthy.discard(node.node_id)
            self.wanted.set()  # work may go there again
        elif not node.healthy and node.node_id not in self.unhealthy:
            self.unhealthy.add(node.node_id)
            log.warning("node %s is unhealthy in the live view; no new work there", node.node_id)

    def on_priority(self, update: PriorityUpdate) -> None:
        """The processor's priorities, passed on to the cluster for jobs still waiting."""
        if update.job_id in self.scheduler.queue:
            self.priorities.put_nowait(update)

    async def forward_priorities(self) -> None:
        while True:
            update = await self.priorities.get()
            if update.job_id in self.scheduler.queue:
                try:
                    await self.backend.prioritize(update.job_id, update.score)
                except BackendError as exc:
                    log.warning("priority of %s not passed on: %s", update.job_id, exc)

    def on_control(self, parameter: ControlParameter) -> None:
        """A parameter from the control topic, checked against its bounds again; what was
        done with it goes to the control status topic (``report_control``)."""
        try:
            params = self.scheduler.params.with_setting(parameter.name, parameter.value)
        except CoreError as exc:
            log.warning("control %s refused: %s", parameter.name, exc)
            self.control_statuses.put_nowait(self.control.rejected(parameter, exc))
            return
        self.scheduler.params = params
        self.scheduler.policy.bind(self.scheduler)
        self.control_statuses.put_nowait(self.control.applied(parameter))
        self.wanted.set()

    async def report_control(self) -> None:
        """Send what ``on_control`` did, and every HEARTBEAT_S the revision in force."""
        topic = CONTROL_STATUS.name(self.prefix)
        while True:
            try:
                status = await asyncio.wait_for(self.control_statuses.get(), HEARTBEAT_S)
            except TimeoutError:
                status = self.control.heartbeat()
            await self.producer.send(topic, encode(status), key=status.service.encode())

    # -- the backend's log -----------------------------------------------------------------
    async def on_backend_event(self, e: BackendEvent) -> None:
        """Apply one event of the backend's log and record it on the jobs topic."""
        if isinstance(e, NodePower):
            if e.power is PowerState.ON and e.node_id in self.scheduler.state.nodes:
                self.scheduler.node_ready(e.node_id, time.time())
            self.wanted.set()
        elif isinstance(e, JobArrived):
            await self._on_job_arrived(e)
        else:
            await self._on_job_step(e)

    async def _on_job_step(self, e: JobStep) -> None:
        self._step(e.job_id, e.type, e.node_ids, e.gpu_indices, time.time())
        if self._already_recorded(e.job_id, e.type):
            self.seq_done = max(self.seq_done, e.seq)
            return
        self._recorded[e.job_id] = e.type
        tenant, cls = self._meta.get(e.job_id, ("default", "normal"))
        event = JobEvent(
            event_id=self.event_id(e.seq),
            ts=datetime.fromtimestamp(e.ts, UTC),
            job_id=e.job_id,
            type=e.type,
            tenant=tenant,
            priority_class=cls,
            node_ids=e.node_ids,
            gpu_indices=e.gpu_indices,
            decision_id=e.decision_id,
            reason=e.reason,
        )
        await self._record(event)
        self.seq_done = max(self.seq_done, e.seq)
        self.stats.recorded += 1

    async def _on_job_arrived(self, e: JobArrived) -> None:
        """A job that arrived through the cluster itself (a pod for our scheduler name):
        recorded on the jobs topic like any submission, then scheduled."""
        self.seq_done = max(self.seq_done, e.seq)
        if e.job_id in self.scheduler.jobs:
            return
        event = JobEvent(
            event_id=self.event_id(e.seq),
            ts=datetime.fromtimestamp(e.ts, UTC),
            job_id=e.job_id,
            type=JobEventType.SUBMITTED,
            tenant=e.tenant,
            priority_class=e.priority_class,
            request=job_request(e.request),
        )
        await self._record(event)
        self._recorded[e.job_id] = JobEventType.SUBMITTED
        self._submit(event, time.time())

    async def _record(self, event: JobEvent) -> None:
        topic = JOBS.name(self.prefix)
        await self.producer.send_and_wait(topic, encode(event), key=event.job_id.encode())

    def _already_recorded(self, job_id: str, kind: JobEventType) -> bool:
        """A backend whose log restarted (Slurm: a new backend object) reports again what
        the topic already holds; the topic records each step once."""
        last = self._recorded.get(job_id)
        if last is None:
            return job_id not in self.scheduler.jobs and kind.ends
        if last.ends or kind is last:
            return True
        return kind is JobEventType.PLACED and last is JobEventType.RUNNING
