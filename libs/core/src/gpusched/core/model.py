"""The scheduling core's vocabulary: nodes, jobs, requests, decisions, pending reasons.

Plain typed values. A job carries no true duration: policies never see it (the simulator
keeps it apart, and only the labelled oracle is handed a lookup).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "EPS",
    "Allocation",
    "Decision",
    "Job",
    "JobState",
    "NodeSpec",
    "ParkNode",
    "PendingCategory",
    "PendingReason",
    "Place",
    "PowerState",
    "Preempt",
    "Request",
    "WakeNode",
    "held_on",
]

EPS = 1e-9


class PowerState(StrEnum):
    ON = "on"
    PARKED = "parked"
    WAKING = "waking"


class PendingCategory(StrEnum):
    """Why a job waits, for counting (``PendingReason`` says it in words)."""

    PRIORITY = "priority"  # nodes fit it, but jobs ahead in policy order take them first
    CAPACITY = "capacity"  # no node it accepts has room now (or is on)
    RESERVATION = "reservation"  # nodes are reserved for it; it starts when they free up
    NEVER = "never"  # no node of the cluster could ever hold it


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class Request:
    """What a job needs at once: ``num_gpu`` whole GPUs (a gang) or a share (< 1) of one.

    ``gpu_models`` empty means any model. CPU and memory are per job (split evenly across
    nodes when a gang spans several).
    """

    num_gpu: float
    gpu_models: frozenset[str] = frozenset()
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def is_fraction(self) -> bool:
        return 0 < self.num_gpu < 1

    @property
    def gpu_share(self) -> float:
        """The share of each GPU it holds: its fraction, else 1.0 (whole GPUs)."""
        return self.num_gpu if self.is_fraction else 1.0

    @property
    def whole_gpus(self) -> int:
        return int(self.num_gpu) if self.num_gpu >= 1 else 0

    def allows(self, gpu_model: str) -> bool:
        return not self.gpu_models or gpu_model in self.gpu_models

    def describe(self) -> str:
        models = "|".join(sorted(self.gpu_models)) or "any GPU"
        if self.num_gpu == 0:
            return f"{self.cpu_milli / 1000:g} CPUs (no GPU)"
        if self.is_fraction:
            return f"{self.num_gpu:g} of one {models}"
        return f"{self.whole_gpus} x {models}"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as built: its GPU model and sizes."""

    node_id: str
    gpu_model: str
    num_gpus: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a job runs: per node, the GPU indices and the share of each (1.0 = whole)."""

    node_id: str
    gpu_indices: tuple[int, ...]
    share: float
    cpu_milli: int
    memory_mib: int


def held_on(
    request: Request, node_ids: tuple[str, ...], gpu_indices: tuple[tuple[int, ...], ...]
) -> tuple[Allocation, ...]:
    """The allocations of ``request`` running on these GPUs of these nodes (as a cluster
    reports it): its GPU share on each, CPU and memory split evenly across the nodes."""
    n = max(len(node_ids), 1)
    return tuple(
        Allocation(
            node, tuple(idx), request.gpu_share, request.cpu_milli // n, request.memory_mib // n
        )
        for node, idx in zip(node_ids, gpu_indices, strict=False)
    )


@dataclass(slots=True)
class Job:
    """A job as the scheduler sees it: request, identity, and what it has received so far.

    ``attained_gpu_s`` is GPU-seconds of service received (Tiresias' 2D attained service),
    ``executed_s`` wall seconds of running; both exclude the current run until it ends.
    """

    job_id: str
    request: Request
    submit_time: float
    tenant: str = "default"
    qos: str = "normal"
    state: JobState = JobState.PENDING
    attained_gpu_s: float = 0.0
    executed_s: float = 0.0
    run_start: float | None = None
    pending_since: float = 0.0
    preemptions: int = 0
    allocations: tuple[Allocation, ...] = ()
    first_start: float | None = None

    def running_for(self, now: float) -> float:
        """Seconds since the current run started (0 when not running)."""
        return now - self.run_start if self.run_start is not None else 0.0

    def executed_at(self, now: float) -> float:
        """Wall seconds run so far, including the current run."""
        current = now - self.run_start if self.run_start is not None else 0.0
        return self.executed_s + current

    def attained_at(self, now: float) -> float:
        """GPU-seconds of service so far, including the current run."""
        return self.attained_gpu_s + (self.executed_at(now) - self.executed_s) * max(
            self.request.num_gpu, 0.0
        )


@dataclass(frozen=True, slots=True)
class Place:
    job_id: str
    allocations: tuple[Allocation, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ParkNode:
    node_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WakeNode:
    node_id: str
    reason: str = ""


Decision = Place | Preempt | ParkNode | WakeNode


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job is still pending, in words, with the category for counting."""

    category: PendingCategory
    message: str
    blockers: tuple[str, ...] = field(default=())
    # the core's estimate of when it starts: its reservation's start, else the queue
    # played forward on predicted run times (core.starts); None when it cannot tell (it
    # can never run, or is too far down a long queue)
    start_estimate: float | None = None
