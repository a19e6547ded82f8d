"""A live simulated cluster: the ``sim`` backend's other side, run as its own process.

It holds the nodes of a cluster CSV and the jobs placed on them. A placed job finishes
after its run time (the trace's duration for a trace job id, else
``simcluster_default_duration_s``), divided by ``simcluster_speed`` — a time-compressed
replay on the wall clock, so every timestamp is real time. Preemption keeps the work
done minus nothing (the restart cost is the policy's assumption, not the cluster's); a
woken node is ready after the power model's wake latency, also divided by the speed.
Everything that happens is appended to an event log with increasing sequence numbers,
served to the dispatcher by long polling. It is a separate process so that a dispatcher
can crash and come back to a cluster that went on without it, as a real one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, Field

from gpusched.contracts import JobEventType
from gpusched.core import (
    Allocation,
    ClusterState,
    InvalidDecision,
    NodeSpec,
    PowerModel,
    PowerState,
)
from gpusched.sim import load_jobs

__all__ = ["ClusterEvent", "PlaceBody", "SimCluster", "simcluster_app", "trace_durations"]


class PlaceBody(BaseModel):
    node_ids: tuple[str, ...] = Field(min_length=1)
    gpu_indices: tuple[tuple[int, ...], ...]
    share: float = Field(default=1.0, ge=0, le=1)  # 0: a CPU-only job
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    decision_id: str


class DecisionBody(BaseModel):
    decision_id: str = ""


class ClusterEvent(BaseModel):
    """One entry of the event log, as ``GET /events`` serves it: a job's step
    (``kind="job"``: job_id, type, where) or a node's power change (``kind="node"``)."""

    seq: int
    ts: float
    kind: Literal["job", "node"]
    job_id: str | None = None
    type: JobEventType | None = None
    node_ids: tuple[str, ...] = ()
    gpu_indices: tuple[tuple[int, ...], ...] = ()
    decision_id: str | None = None
    reason: str | None = None
    node_id: str | None = None
    power: PowerState | None = None


class SimCluster:
    """The cluster's state and event log (one asyncio loop; no locking needed)."""

    def __init__(
        self,
        nodes: list[NodeSpec],
        durations: dict[str, float],
        speed: float = 1.0,
        default_duration_s: float = 60.0,
        power: PowerModel | None = None,
    ) -> None:
        self.specs = {n.node_id: n for n in nodes}
        self.state = ClusterState(nodes)
        self.durations, self.speed, self.default_duration_s = durations, speed, default_duration_s
        self.power = power or PowerModel()
        self.log_id = uuid.uuid4().hex[:12]
        self.log: list[ClusterEvent] = []
        self.running: dict[str, tuple[PlaceBody, float]] = {}  # job -> (where, started)
        self.left: dict[str, float] = {}  # wall seconds of work still to do
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._changed = asyncio.Condition()

    # -- the log ----------------------------------------------------------------------
    def _append(self, kind: Literal["job", "node"], **fields: Any) -> None:
        event = ClusterEvent(seq=len(self.log) + 1, ts=time.time(), kind=kind, **fields)
        self.log.append(event)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_events(self, after: int, timeout_s: float) -> list[ClusterEvent]:
        if len(self.log) <= after:
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout_s)
        return self.log[after:]

    # -- jobs -------------------------------------------------------------------------
    def place(self, job_id: str, body: PlaceBody) -> None:
        if job_id in self.running:
            by = self.running[job_id][0].decision_id
            raise HTTPException(409, f"job {job_id} already runs (placed by decision {by})")
        try:
            self.state.allocate(job_id, self._allocations(body))
        except (InvalidDecision, IndexError) as exc:
            raise HTTPException(409, f"not placeable: {exc}") from exc
        now = time.time()
        self.running[job_id] = (body, now)
        left = self.left.setdefault(job_id, self._duration(job_id))
        where = {"node_ids": body.node_ids, "gpu_indices": body.gpu_indices}
        self._append(
            "job", job_id=job_id, type=JobEventType.PLACED, decision_id=body.decision_id, **where
        )
        self._append(
            "job", job_id=job_id, type=JobEventType.RUNNING, decision_id=body.decision_id, **where
        )
        loop = asyncio.get_running_loop()
        self._timers[job_id] = loop.call_later(left, self._finish, job_id)

    def _duration(self, job_id: str) -> float:
        return self.durations.get(job_id, self.default_duration_s) / self.speed

    def _allocations(self, body: PlaceBody) -> tuple[Allocation, ...]:
        if len(body.gpu_indices) != len(body.node_ids):
            raise HTTPException(422, "gpu_indices needs one tuple per node in node_ids")
        n = len(body.node_ids)
        return tuple(
            Allocation(node, tuple(idx), body.share, body.cpu_milli // n, body.memory_mib // n)
            for node, idx in zip(body.node_ids, body.gpu_indices, strict=True)
        )

    def _release(self, job_id: str) -> PlaceBody:
        body, started = self.running.pop(job_id)
        self.state.release(job_id, self._allocations(body), journal=False)
        self.left[job_id] = max(self.left[job_id] - (time.time() - started), 0.0)
        timer = self._timers.pop(job_id, None)
        if timer is not None:
            timer.cancel()
        return body

    def _finish(self, job_id: str) -> None:
        if job_id in self.running:
            self._release(job_id)
            self.left.pop(job_id, None)
            self._append("job", job_id=job_id, type=JobEventType.FINISHED)

    def preempt(self, job_id: str, decision_id: str) -> None:
        if job_id not in self.running:
            raise HTTPException(409, f"job {job_id} does not run")
        self._release(job_id)
        self._append("job", job_id=job_id, type=JobEventType.PREEMPTED, decision_id=decision_id)

    def cancel(self, job_id: str) -> None:
        if job_id in self.running:
            self._release(job_id)
            self.left.pop(job_id, None)
            self._append("job", job_id=job_id, type=JobEventType.CANCELLED, reason="cancelled")

    # -- nodes ------------------------------------------------------------------------
    def park(self, node_id: str, decision_id: str) -> None:
        node = self._node(node_id)
        if node.jobs:
            raise HTTPException(409, f"node {node_id} runs jobs; it cannot be parked")
        if node.power is PowerState.ON:
            self.state.set_power(node_id, PowerState.PARKED)
            self._append("node", node_id=node_id, power=PowerState.PARKED, decision_id=decision_id)

    def wake(self, node_id: str, decision_id: str) -> None:
        node = self._node(node_id)
        if node.power is PowerState.PARKED:
            latency = self.power.wake_latency_s / self.speed
            self.state.set_power(node_id, PowerState.WAKING, time.time() + latency)
            self._append("node", node_id=node_id, power=PowerState.WAKING, decision_id=decision_id)
            asyncio.get_running_loop().call_later(latency, self._ready, node_id)

    def _ready(self, node_id: str) -> None:
        if self.state.nodes[node_id].power is PowerState.WAKING:
            self.state.set_power(node_id, PowerState.ON)
            self._append("node", node_id=node_id, power=PowerState.ON)

    def _node(self, node_id: str) -> Any:
        node = self.state.nodes.get(node_id)
        if node is None:
            raise HTTPException(404, f"no node {node_id}")
        return node


def simcluster_app(cluster: SimCluster) -> FastAPI:
    """The HTTP face of a ``SimCluster`` (what ``SimBackend`` talks to)."""
    app = FastAPI(title="gpusched simulated cluster", version="1")

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {"log_id": cluster.log_id, "speed": cluster.speed, "events": len(cluster.log)}

    @app.get("/nodes")
    async def nodes() -> list[dict[str, Any]]:
        return [
            {**asdict(cluster.specs[n.node_id]), "power": n.power.value}
            for n in cluster.state.nodes.values()
        ]

    @app.get("/jobs")
    async def jobs() -> list[dict[str, Any]]:
        return [
            {"job_id": j, "node_ids": b.node_ids, "gpu_indices": b.gpu_indices, "share": b.share}
            for j, (b, _) in cluster.running.items()
        ]

    @app.post("/jobs/{job_id}/place", status_code=204)
    async def place(job_id: str, body: PlaceBody) -> None:
        cluster.place(job_id, body)

    @app.post("/jobs/{job_id}/preempt", status_code=204)
    async def preempt(job_id: str, body: DecisionBody) -> None:
        cluster.preempt(job_id, body.decision_id)

    @app.delete("/jobs/{job_id}", status_code=204)
    async def cancel(job_id: str) -> None:
        cluster.cancel(job_id)

    @app.post("/nodes/{node_id}/park", status_code=204)
    async def park(node_id: str, body: DecisionBody) -> None:
        cluster.park(node_id, body.decision_id)

    @app.post("/nodes/{node_id}/wake", status_code=204)
    async def wake(node_id: str, body: DecisionBody) -> None:
        cluster.wake(node_id, body.decision_id)

    @app.get("/events")
    async def events(
        after: Annotated[int, Query(ge=0)] = 0,
        timeout_s: Annotated[float, Query(ge=0, le=60)] = 10.0,
    ) -> list[ClusterEvent]:
        return await cluster.wait_events(after, timeout_s)

    return app


def trace_durations(path: Path | None) -> dict[str, float]:
    """Job id -> run time from a trace (for the cluster only; policies never see it)."""
    if path is None:
        return {}

    return {j.job_id: j.duration_s for j in load_jobs(path)}
