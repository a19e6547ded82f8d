"""What the processor keeps per job and per node, folded from events (and sends between its stages).

Records are plain JSON-able pydantic models so that the compacted merge topic holds them
and a restarted worker rebuilds the same state.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from gpusched.contracts import (
    ControlParameter,
    GpuTelemetrySample,
    HostSample,
    JobEvent,
    JobEventType,
    JobRequest,
)

__all__ = [
    "NO_GPU",
    "Delta",
    "EndedJobs",
    "GpuReading",
    "JobRecord",
    "NodeRecord",
    "fold_job",
    "job_key",
    "newer_job",
]

NO_GPU = "none"  # the GPU model of a node without GPUs, in its record and its NodeView


class JobRecord(BaseModel):
    """A job's standing: request, owner, state and the service it has had so far."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    tenant: str
    priority_class: str
    request: JobRequest
    submit_ts: float
    state: str = "pending"  # pending | running | ended
    run_start: float | None = None
    node_ids: tuple[str, ...] = ()
    gpu_indices: tuple[tuple[int, ...], ...] = ()
    executed_s: float = 0.0
    preemptions: int = 0
    end_ts: float | None = None
    last_event_ts: float = 0.0
    last_event_id: str | None = None  # the same event read twice is applied once


def fold_job(record: JobRecord | None, event: JobEvent) -> JobRecord | None:
    """The record after ``event``; None for a lifecycle event of a job never submitted."""
    ts = event.ts.timestamp()
    if record is not None and event.event_id == record.last_event_id:
        return record
    if event.type is JobEventType.SUBMITTED:
        if record is not None:
            return record  # a replayed submission changes nothing
        assert event.request is not None  # the contract requires it on 'submitted'
        return JobRecord(
            job_id=event.job_id,
            tenant=event.tenant,
            priority_class=event.priority_class,
            request=event.request,
            submit_ts=ts,
            last_event_ts=ts,
            last_event_id=event.event_id,
        )
    if record is None or record.state == "ended" or ts < record.last_event_ts:
        return record
    update: dict[str, object] = {"last_event_ts": ts, "last_event_id": event.event_id}
    if event.type.holds_gpus:
        if record.state != "running":
            update["run_start"] = ts
        update |= {"state": "running", "node_ids": event.node_ids, "gpu_indices": event.gpu_indices}
    elif event.type.requeues or event.type.ends:
        if record.state == "running" and record.run_start is not None:
            update["executed_s"] = record.executed_s + max(ts - record.run_start, 0.0)
        update |= {"run_start": None, "node_ids": (), "gpu_indices": ()}
        if event.type.requeues:
            update |= {"state": "pending", "preemptions": record.preemptions + 1}
        else:
            update |= {"state": "ended", "end_ts": ts}
    return record.model_copy(update=update)


def newer_job(seen: JobRecord | None, incoming: JobRecord) -> JobRecord:
    """The record the merger keeps: an ended job stays ended (a submission replayed after
    its first worker forgot it cannot revive it), and an older record never replaces a
    newer one."""
    if seen is not None and (seen.state == "ended" or incoming.last_event_ts < seen.last_event_ts):
        return seen
    return incoming


class GpuReading(NamedTuple):
    """The latest sample of one GPU, as much of it as the view needs: a tuple, a JSON
    array on the merge topic (a worker makes one per sample, thousands a second, and a
    pydantic model cost 13x as much to build)."""

    gpu_index: int
    ts: float
    utilization_pct: float
    power_w: float
    ecc_uncorrected: int = 0


class NodeRecord(BaseModel):
    """The latest reading of every GPU of one node; of a node without GPUs, its latest
    host reading (when, and its size)."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    gpu_model: str
    gpus: dict[str, GpuReading] = {}
    host_ts: float | None = None
    cpu_milli: int | None = None
    memory_mib: int | None = None

    def observe_host(self, sample: HostSample) -> None:
        """Keep ``sample`` if it is the newest host reading."""
        self._keep_host(sample.ts.timestamp(), sample.cpu_milli, sample.memory_mib)

    def _keep_host(self, ts: float, cpu_milli: int | None, memory_mib: int | None) -> None:
        if self.host_ts is None or ts >= self.host_ts:
            self.host_ts, self.cpu_milli, self.memory_mib = ts, cpu_milli, memory_mib

    def _keep_gpu(self, uuid: str, reading: GpuReading) -> None:
        """Keep ``reading`` if it is the newest of its GPU."""
        seen = self.gpus.get(uuid)
        if seen is None or reading.ts >= seen.ts:
            self.gpus[uuid] = reading

    def merge(self, part: NodeRecord) -> None:
        """Fold in the readings another worker saw of this node (the GPUs whose telemetry
        partitions it reads), keeping the newest of each GPU and of the host."""
        for uuid, reading in part.gpus.items():
            self._keep_gpu(uuid, reading)
        if part.host_ts is not None:
            self._keep_host(part.host_ts, part.cpu_milli, part.memory_mib)
        if part.gpu_model != NO_GPU:
            self.gpu_model = part.gpu_model

    def observe(self, sample: GpuTelemetrySample) -> None:
        """Keep ``sample`` if it is the newest of its GPU."""
        reading = GpuReading(
            sample.gpu_index,
            sample.ts.timestamp(),
            sample.utilization_pct,
            sample.power_w,
            sample.ecc_uncorrected,
        )
        self._keep_gpu(sample.gpu_uuid, reading)


class EndedJobs:
    """The ended jobs kept per tenant, newest ``limit`` of each: their run times feed the
    run-time predictor and their GPU time the fair share; older ones are forgotten, so
    the processor's state stays bounded however long it runs."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_tenant: dict[str, list[tuple[float, str]]] = {}
        self._kept: set[str] = set()

    def add(self, record: JobRecord) -> list[str]:
        """Note an ended job (once: noting it again changes nothing); the ids of the jobs
        to forget now (the oldest beyond the limit of its tenant)."""
        if record.job_id in self._kept:
            return []
        self._kept.add(record.job_id)
        kept = self._by_tenant.setdefault(record.tenant, [])
        heapq.heappush(kept, (record.end_ts or 0.0, record.job_id))
        gone = [heapq.heappop(kept)[1] for _ in range(len(kept) - self.limit)]
        self._kept.difference_update(gone)
        return gone


class Delta(BaseModel):
    """What a worker sends the merger on the internal merge topic, keyed so that the
    compacted topic keeps the latest of each: exactly one of a job's record after an
    event (``job:<id>``, the merger's: it folds the events), a job event a worker read
    (``event:<job id>``), a control parameter it accepted (``param:<name>``), its part
    of a node, everything it has read of that node on one input partition
    (``node:<id>:<part>``, ``part`` naming the topic and partition; ``m``: the merger's
    checkpoint of the whole node when GPUs appear), or, from the merger
    itself, the last priority epoch it published (``epoch``: epochs keep increasing
    across a change of merger)."""

    model_config = ConfigDict(extra="forbid")

    node: NodeRecord | None = None
    part: str | None = None
    job: JobRecord | None = None
    event: JobEvent | None = None
    parameter: ControlParameter | None = None
    epoch: int | None = None

    def key(self) -> bytes:
        if self.node is not None:
            return f"node:{self.node.node_id}:{self.part}".encode()
        if self.job is not None:
            return job_key(self.job.job_id)
        if self.event is not None:
            return f"event:{self.event.job_id}".encode()
        if self.parameter is not None:
            return f"param:{self.parameter.name}".encode()
        return b"epoch"


def job_key(job_id: str) -> bytes:
    """A job's record's key on the merge topic (a tombstone under it, and one under its
    ``event:`` key, forget the job)."""
    return f"job:{job_id}".encode()
