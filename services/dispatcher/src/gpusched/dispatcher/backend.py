"""One Protocol for every cluster backend (simulated, Slurm, Kubernetes).

A backend carries out decisions and reports what happens on the cluster as an ordered
stream of ``BackendEvent`` with increasing sequence numbers. The dispatcher writes every
job event to the jobs topic with an event id made from the backend's ``log_id`` and the
sequence number, so after a restart it resumes the stream right after the last event it
recorded, and a re-sent event is the same event (the sink keeps one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from gpusched.contracts import JobEventType
from gpusched.core import Allocation, Job, PowerState, Request

__all__ = [
    "AlreadyPlaced",
    "Backend",
    "BackendError",
    "BackendEvent",
    "BackendJob",
    "BackendNode",
    "NotPlaceable",
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
class BackendEvent:
    """Something that happened on the cluster: a job's lifecycle step or a node's power."""

    seq: int
    ts: float
    job_id: str | None = None
    type: JobEventType | None = None
    node_ids: tuple[str, ...] = ()
    gpu_indices: tuple[tuple[int, ...], ...] = ()
    decision_id: str | None = None
    reason: str | None = None
    node_id: str | None = None
    power: PowerState | None = None
    # on 'submitted' only: a job that arrived through the cluster (a Kubernetes pod)
    request: Request | None = None
    tenant: str = "default"
    priority_class: str = "normal"


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

    async def park(self, node_id: str, decision_id: str) -> None: ...

    async def wake(self, node_id: str, decision_id: str) -> None:
        """Start waking a parked node; it is reported ON when ready."""
        ...

    def events(self, after: int) -> AsyncIterator[BackendEvent]:
        """Every event with a sequence number above ``after``, then new ones as they come."""
        ...

    async def close(self) -> None: ...
