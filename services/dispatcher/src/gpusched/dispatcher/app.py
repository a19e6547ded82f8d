"""The dispatcher: the core's scheduling cycle on a live cluster.

State is a ``gpusched.core.Scheduler`` (the simulator's code). It is rebuilt on every
start from the jobs topic (everything ever submitted and every lifecycle step recorded,
replayed in time order) and the backend's event log after the last step recorded, so a
restart neither loses a job nor places one twice: a placement only counts once the
backend reports it, and the backend refuses to start a job that already runs.

Each decision of a cycle is published to the placements topic (decision id
``<epoch>-<n>``; the epoch grows with every start) before it is applied through the
backend. The backend's lifecycle events are applied to the scheduler and recorded on the
jobs topic under deterministic event ids (``<backend>-<log id>-<seq>``), which is how the
next start knows where to resume the backend's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from gpusched.contracts import (
    ControlParameter,
    DecisionAction,
    DemandForecast,
    JobEvent,
    JobEventType,
    JobRequest,
    NodeView,
    PlacementDecision,
    PriorityUpdate,
    encode,
)
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.topics import CONTROL, FORECASTS, JOBS, PLACEMENTS, PRIORITIES, VIEW
from gpusched.core import (
    Allocation,
    CoreError,
    Decision,
    InvalidDecision,
    Job,
    JobState,
    NodeSpec,
    Params,
    ParkNode,
    Place,
    PowerState,
    Preempt,
    Request,
    Scheduler,
    WakeNode,
    make_placement,
    make_policy,
)
from gpusched.dispatcher.backend import (
    AlreadyPlaced,
    Backend,
    BackendError,
    BackendEvent,
    NotPlaceable,
)
from gpusched.dispatcher.outlook import LiveOutlook
from gpusched.dispatcher.settings import DispatcherSettings

__all__ = ["Dispatcher", "DispatcherStats", "run_dispatcher"]

log = logging.getLogger(__name__)
_CATCH_UP_S = 120.0


def job_of(event: JobEvent) -> Job:
    """The core's view of a submitted job (the contract guarantees its request)."""
    assert event.request is not None
    r = event.request
    return Job(
        event.job_id,
        Request(r.num_gpu, frozenset(r.gpu_models), r.cpu_milli, r.memory_mib),
        event.ts.timestamp(),
        event.tenant,
        event.priority_class,
    )


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
    producer: AIOKafkaProducer
    scheduler: Scheduler
    epoch: int
    log_id: str
    outlook: LiveOutlook
    seq_done: int = 0
    stats: DispatcherStats = field(default_factory=DispatcherStats)
    wanted: asyncio.Event = field(default_factory=asyncio.Event)
    _decisions: int = 0
    _meta: dict[str, tuple[str, str]] = field(default_factory=dict)  # job -> tenant, class
    _recorded: dict[str, JobEventType] = field(default_factory=dict)  # last step on the topic
    unhealthy: set[str] = field(default_factory=set)  # nodes the live view says are not
    priorities: asyncio.Queue[PriorityUpdate] = field(default_factory=asyncio.Queue)

    @property
    def prefix(self) -> str:
        return self.settings.topic_prefix

    def event_id(self, seq: int) -> str:
        return f"{self.backend.name}-{self.log_id}-{seq}"

    # -- what happened --------------------------------------------------------------------
    def submitted(self, event: JobEvent, now: float) -> None:
        if event.job_id in self.scheduler.jobs:
            return  # a replayed submission
        self.scheduler.submit(job_of(event), now)
        self._meta[event.job_id] = (event.tenant, event.priority_class)
        self.wanted.set()

    def lifecycle(
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
            share = job.request.num_gpu if job.request.is_fraction else 1.0
            n = max(len(node_ids), 1)
            allocs = tuple(
                Allocation(node, tuple(idx), share, job.request.cpu_milli // n,
                           job.request.memory_mib // n)
                for node, idx in zip(node_ids, gpu_indices, strict=False)
            )  # fmt: skip
            try:
                s.assume(job_id, allocs, now)
            except InvalidDecision as exc:
                log.warning("job %s runs where the scheduler has no room: %s", job_id, exc)
        elif kind.requeues and running:
            s.requeue(job_id, now)
        elif kind.ends and running and kind is not JobEventType.CANCELLED:
            s.finish(job_id, now)  # feeds the run-time predictor
        elif kind.ends:
            s.cancel(job_id, now)
        self.wanted.set()

    def recorded(self, event: JobEvent) -> None:
        """A job event read back from the topic while rebuilding."""
        self._recorded[event.job_id] = event.type
        now = event.ts.timestamp()
        if event.type is JobEventType.SUBMITTED:
            self.submitted(event, now)
        else:
            self.lifecycle(event.job_id, event.type, event.node_ids, event.gpu_indices, now)
        if self.ours(event):
            seq = int(event.event_id.rsplit("-", 1)[1])
            self.seq_done = max(self.seq_done, seq)

    def live(self, event: JobEvent) -> None:
        """A job event from the topic once rebuilt: submissions and cancellations from
        users; lifecycle steps the backend reported are applied when it reports them."""
        now = time.time()
        if event.type is JobEventType.SUBMITTED:
            self.submitted(event, now)
        elif event.type is JobEventType.CANCELLED and not self.ours(event):
            if event.job_id in self.scheduler.running:  # the backend reports it cancelled
                asyncio.get_running_loop().create_task(self.backend.cancel(event.job_id))
            else:
                self.lifecycle(event.job_id, event.type, (), (), now)

    def ours(self, event: JobEvent) -> bool:
        """Recorded from this backend's log (not sent by a user or integrator)."""
        return event.event_id.startswith(f"{self.backend.name}-{self.log_id}-")

    def view(self, node: NodeView) -> None:
        """The processor's live view: an unhealthy node (uncorrected ECC errors, all GPUs
        stale) gets no new work until it is healthy again."""
        if node.node_id not in self.scheduler.state.nodes:
            return
        if node.healthy:
            self.unhealthy.discard(node.node_id)
        elif node.node_id not in self.unhealthy:
            self.unhealthy.add(node.node_id)
            log.warning("node %s is unhealthy in the live view; no new work there", node.node_id)

    def priority(self, update: PriorityUpdate) -> None:
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

    def control(self, parameter: ControlParameter) -> None:
        try:
            params = self.scheduler.params.with_setting(parameter.name, parameter.value)
        except CoreError as exc:
            log.warning("control %s refused: %s", parameter.name, exc)
            return
        self.scheduler.params = params
        self.scheduler.policy.bind(self.scheduler)
        self.wanted.set()

    async def backend_event(self, e: BackendEvent) -> None:
        """Apply one event of the backend's log and record it on the jobs topic."""
        now = time.time()
        if e.node_id is not None and e.power is not None:
            node = self.scheduler.state.nodes.get(e.node_id)
            if node is not None and e.power is PowerState.ON:
                self.scheduler.node_ready(e.node_id, now)
            self.wanted.set()
            return
        if e.job_id is None or e.type is None:
            return
        if e.type is JobEventType.SUBMITTED:
            await self._submitted_by_cluster(e)
            return
        self.lifecycle(e.job_id, e.type, e.node_ids, e.gpu_indices, now)
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
        await self.producer.send_and_wait(
            JOBS.name(self.prefix), encode(event), key=e.job_id.encode()
        )
        self.seq_done = max(self.seq_done, e.seq)
        self.stats.recorded += 1

    async def _submitted_by_cluster(self, e: BackendEvent) -> None:
        """A job that arrived through the cluster itself (a pod for our scheduler name):
        recorded on the jobs topic like any submission, then scheduled."""
        self.seq_done = max(self.seq_done, e.seq)
        if e.job_id is None or e.request is None or e.job_id in self.scheduler.jobs:
            return
        r = e.request
        event = JobEvent(
            event_id=self.event_id(e.seq),
            ts=datetime.fromtimestamp(e.ts, UTC),
            job_id=e.job_id,
            type=JobEventType.SUBMITTED,
            tenant=e.tenant,
            priority_class=e.priority_class,
            request=JobRequest(
                num_gpu=r.num_gpu,
                gpu_models=tuple(sorted(r.gpu_models)),
                cpu_milli=r.cpu_milli,
                memory_mib=r.memory_mib,
            ),
        )
        topic = JOBS.name(self.prefix)
        await self.producer.send_and_wait(topic, encode(event), key=e.job_id.encode())
        self._recorded[e.job_id] = JobEventType.SUBMITTED
        self.submitted(event, time.time())

    def _already_recorded(self, job_id: str, kind: JobEventType) -> bool:
        """A backend whose log restarted (Slurm: a new backend object) reports again what
        the topic already holds; the topic records each step once."""
        last = self._recorded.get(job_id)
        if last is None:
            return job_id not in self.scheduler.jobs and kind.ends
        if last.ends or kind is last:
            return True
        return kind is JobEventType.PLACED and last is JobEventType.RUNNING

    # -- what to do -------------------------------------------------------------------------
    async def cycle(self) -> int:
        """One scheduling cycle: every decision is published (all of them, awaited) before
        the first is applied."""
        now = time.time()
        state = self.scheduler.state
        state.hide(self.unhealthy)
        try:
            decisions = self.scheduler.cycle(now).decisions
        finally:
            state.unhide(self.unhealthy)
        numbered = []
        for d in decisions:
            self._decisions += 1
            numbered.append((d, f"{self.epoch}-{self._decisions}"))
        topic = PLACEMENTS.name(self.prefix)
        sent = [
            await self.producer.send(
                topic, encode(_decision(d, decision_id, self.epoch)), key=decision_id.encode()
            )
            for d, decision_id in numbered
        ]
        await asyncio.gather(*sent)
        for d, decision_id in numbered:
            await self._apply(d, decision_id, now)
        return len(decisions)

    async def _apply(self, d: Decision, decision_id: str, now: float) -> None:
        try:
            if isinstance(d, Place):
                await self.backend.place(self.scheduler.jobs[d.job_id], d.allocations, decision_id)
            elif isinstance(d, Preempt):
                await self.backend.preempt(d.job_id, decision_id)
            elif isinstance(d, ParkNode):
                await self.backend.park(d.node_id, decision_id)
            elif isinstance(d, WakeNode):
                await self.backend.wake(d.node_id, decision_id)
            self.stats.applied += 1
        except AlreadyPlaced as exc:
            self.stats.refused += 1
            log.warning("decision %s: %s", decision_id, exc)  # it runs: its events say where
        except NotPlaceable as exc:
            self.stats.refused += 1
            log.warning("decision %s refused (%s); the job waits again", decision_id, exc)
            if isinstance(d, Place) and d.job_id in self.scheduler.running:
                self.scheduler.requeue(d.job_id, now)
            elif isinstance(d, ParkNode | WakeNode):  # the node stays as the cluster has it
                before = PowerState.ON if isinstance(d, ParkNode) else PowerState.PARKED
                self.scheduler.state.set_power(d.node_id, before)
        except BackendError as exc:
            self.stats.refused += 1
            log.error("decision %s not applied: %s", decision_id, exc)
            if isinstance(d, Place) and d.job_id in self.scheduler.running:
                # Placing again is safe: a backend refuses a job that already runs, and
                # if this one did start, its 'placed' event puts it back to running here.
                self.scheduler.requeue(d.job_id, now)


def _decision(d: Decision, decision_id: str, epoch: int) -> PlacementDecision:
    reason = str(getattr(d, "reason", ""))
    if isinstance(d, Place):
        return PlacementDecision(
            decision_id=decision_id,
            epoch=epoch,
            reason=reason,
            action=DecisionAction.PLACE,
            job_id=d.job_id,
            node_ids=tuple(a.node_id for a in d.allocations),
            gpu_indices=tuple(a.gpu_indices for a in d.allocations),
            gpu_share=d.allocations[0].share if d.allocations else None,
        )
    if isinstance(d, Preempt):
        return PlacementDecision(
            decision_id=decision_id,
            epoch=epoch,
            reason=reason,
            action=DecisionAction.PREEMPT,
            job_id=d.job_id,
        )
    action = DecisionAction.PARK if isinstance(d, ParkNode) else DecisionAction.WAKE
    return PlacementDecision(
        decision_id=decision_id, epoch=epoch, reason=reason, action=action, node_ids=(d.node_id,)
    )


async def _read_all(bootstrap: str, topic: str, model: type, into: list) -> None:  # type: ignore[type-arg]
    caught_up = asyncio.Event()
    task = asyncio.create_task(follow_topic(bootstrap, topic, model, into.append, caught_up))
    try:
        await asyncio.wait_for(caught_up.wait(), _CATCH_UP_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def build_dispatcher(
    settings: DispatcherSettings, backend: Backend, producer: AIOKafkaProducer
) -> Dispatcher:
    """The scheduler as of now: nodes from the backend, jobs from the topic's record."""
    bootstrap, prefix = settings.kafka_bootstrap_servers, settings.topic_prefix
    nodes = await backend.nodes()
    decisions: list[PlacementDecision] = []
    await _read_all(bootstrap, PLACEMENTS.name(prefix), PlacementDecision, decisions)
    epoch = max((d.epoch for d in decisions), default=-1) + 1
    outlook = LiveOutlook()
    scheduler = Scheduler(
        [NodeSpec(n.node_id, n.gpu_model, n.num_gpus, n.cpu_milli, n.memory_mib) for n in nodes],
        make_policy(settings.dispatcher_policy),
        make_placement(settings.dispatcher_placement),
        Params(),
        outlook=outlook,
    )
    for n in nodes:
        if n.power is not PowerState.ON:
            scheduler.state.set_power(n.node_id, n.power)
    d = Dispatcher(settings, backend, producer, scheduler, epoch, await backend.log_id(), outlook)
    events: list[JobEvent] = []
    await _read_all(bootstrap, JOBS.name(prefix), JobEvent, events)
    for event in sorted(events, key=lambda e: e.ts):
        d.recorded(event)
    for running in await backend.jobs():
        job = scheduler.jobs.get(running.job_id)
        if job is not None and job.state is JobState.FINISHED:
            # cancelled (by a user) while no dispatcher ran: the cluster still runs it
            log.info("cancelling %s: it ended on the record but still runs", running.job_id)
            await backend.cancel(running.job_id)
    log.info(
        "epoch %d: %d job events replayed (%d jobs, %d running); backend log %s after %d",
        epoch, len(events), len(scheduler.jobs), len(scheduler.running), d.log_id, d.seq_done,
    )  # fmt: skip
    return d


async def run_dispatcher(
    settings: DispatcherSettings, backend: Backend | None = None, stop: asyncio.Event | None = None
) -> DispatcherStats:
    """Dispatch until ``stop`` is set (through the backend the settings name by default)."""
    stop = stop or asyncio.Event()
    if backend is None:
        from gpusched.dispatcher.backends import make_backend

        backend = await make_backend(settings)
    bootstrap, prefix = settings.kafka_bootstrap_servers, settings.topic_prefix
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    tasks: list[asyncio.Task[None]] = []
    try:
        d = await build_dispatcher(settings, backend, producer)

        async def pump() -> None:
            async for event in backend.events(d.seq_done):
                await d.backend_event(event)

        tasks.append(asyncio.create_task(pump()))
        followers = (
            follow_topic(bootstrap, JOBS.name(prefix), JobEvent, d.live, asyncio.Event()),
            follow_topic(
                bootstrap, FORECASTS.name(prefix), DemandForecast, d.outlook.apply, asyncio.Event()
            ),
            follow_topic(
                bootstrap, CONTROL.name(prefix), ControlParameter, d.control, asyncio.Event()
            ),
            follow_topic(bootstrap, VIEW.name(prefix), NodeView, d.view, asyncio.Event()),
            follow_topic(
                bootstrap, PRIORITIES.name(prefix), PriorityUpdate, d.priority, asyncio.Event()
            ),
            d.forward_priorities(),
        )
        tasks += [asyncio.create_task(f) for f in followers]
        while not stop.is_set():
            for task in tasks:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            d.wanted.clear()  # what arrives during the cycle wakes the next one
            await d.cycle()
            wake = d.scheduler.next_wakeup(time.time())
            wait_s = settings.dispatcher_tick_s
            if wake is not None:
                wait_s = min(wait_s, max(wake - time.time(), 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(d.wanted, stop), wait_s)
            await asyncio.sleep(settings.dispatcher_min_cycle_s)
        return d.stats
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()
        await backend.close()


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
