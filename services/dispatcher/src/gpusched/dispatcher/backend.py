"""One Protocol for every cluster backend (simulated, Slurm, Kubernetes).

A backend carries out decisions and reports what happens on the cluster as an ordered
stream of events (``JobStep``, ``NodePower``, ``JobArrived``) with increasing sequence
numbers. The dispatcher writes every
job event to the jobs topic with an event id made from the backend's ``log_id`` and the
sequence number, so after a restart it resumes the stream right after the last event it
recorded, and a re-sent event is the same event (the sink keeps one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpusched.contracts import JobEventType
from gpusched.core import Allocation, Job, PowerState, Request

__all__ = [
    "AlreadyPlaced",
    "Backend",
    "BackendError",
    "BackendEvent",
    "BackendJob",
    "BackendNode",
    "JobArrived",
    "JobStep",
    "NodePower",
    "NotPlaceable",
    "PolledLog",
]


class BackendError(Exception):
    """The backend could not do what was asked; the message says why."""


class AlreadyPlaced(BackendError):
    """The job already runs: placing it again would run it twice."""


class NotPlaceable(BackendError):
    """The allocation is not free (or the node not on) on the cluster right now."""


@dataclass(frozen=True, slots=True)
class BackendNode:
    node_id: str
    gpu_model: str
    num_gpus: int
    cpu_milli: int
    memory_mib: int
    power: PowerState


@dataclass(frozen=True, slots=True)
class BackendJob:
    """A job the cluster runs now, and where."""

    job_id: str
    node_ids: tuple[str, ...]
    gpu_indices: tuple[tuple[int, ...], ...]
    share: float  # of each GPU (1.0 whole)


@dataclass(frozen=True, slots=True)
class JobStep:
    """A job's lifecycle step on the cluster (placed, running, preempted, finished, ...)."""

    seq: int
    ts: float
    job_id: str
    type: JobEventType
    node_ids: tuple[str, ...] = ()
    gpu_indices: tuple[tuple[int, ...], ...] = ()
    decision_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class NodePower:
    """A node's power state changed (parked, waking, on)."""

    seq: int
    ts: float
    node_id: str
    power: PowerState
    decision_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobArrived:
    """A job submitted through the cluster itself (a Kubernetes pod for our scheduler)."""

    seq: int
    ts: float
    job_id: str
    request: Request
    tenant: str = "default"
    priority_class: str = "normal"


BackendEvent = JobStep | NodePower | JobArrived
"""One entry of a backend's event log."""


class Backend(Protocol):
    """What the dispatcher needs of a cluster."""

    name: str

    async def log_id(self) -> str:
        """Identity of this cluster's event log (sequence numbers restart with a new one)."""
        ...

    async def nodes(self) -> list[BackendNode]: ...

    async def jobs(self) -> list[BackendJob]:
        """The jobs running now."""
        ...

    async def place(self, job: Job, allocations: tuple[Allocation, ...], decision_id: str) -> None:
        """Start ``job`` on exactly these GPUs (``AlreadyPlaced``, ``NotPlaceable``)."""
        ...

    async def preempt(self, job_id: str, decision_id: str) -> None:
        """Stop a running job and hand it back to the queue (it is reported preempted)."""
        ...

    async def cancel(self, job_id: str) -> None:
        """Stop a running job for good (reported cancelled); unknown jobs are ignored."""
        ...

    async def prioritize(self, job_id: str, score: float) -> None:
        """Tell the cluster a pending job's priority (lower score runs first), for its
        own queue views; a job it does not hold pending is ignored."""
        ...

    async def park(self, node_id: str, decision_id: str) -> None: ...

    async def wake(self, node_id: str, decision_id: str) -> None:
        """Start waking a parked node; it is reported ON when ready."""
        ...

    def events(self, after: int) -> AsyncIterator[BackendEvent]:
        """Every event with a sequence number above ``after``, then new ones as they come."""
        ...

    async def close(self) -> None: ...


class PolledLog:
    """The event log of a backend that learns what happens by polling its cluster (Slurm,
    Kubernetes): the log lives in the backend object, so each one has a new ``log_id``.

    ``poll`` is called every ``poll_s`` once the log is first read or written to; it
    compares the cluster with what was reported and ``append``s the differences.
    """

    def __init__(self, poll: Callable[[], Awaitable[None]], poll_s: float) -> None:
        self.log_id = uuid.uuid4().hex[:12]
        self.events: list[BackendEvent] = []
        self._poll, self.poll_s = poll, poll_s
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def append(self, kind: type[JobStep | NodePower | JobArrived], **fields: Any) -> None:
        """Log a ``kind`` event with the next sequence number, stamped now."""
        self.events.append(kind(seq=len(self.events) + 1, ts=time.time(), **fields))
        self._changed.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._poll()
            await asyncio.sleep(self.poll_s)

    async def after(self, seq: int) -> AsyncIterator[BackendEvent]:
        """Every event above ``seq``, then new ones as they come (the Protocol's events)."""
        self.start()
        while True:
            while len(self.events) > seq:
                seq += 1
                yield self.events[seq - 1]
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.poll_s * 5)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
