"""The queue and the nodes as the store knows them (what `gpusched queue` / `nodes` and
``GET /jobs`` / ``GET /nodes`` show): each job's last recorded step with its latest
priority and pending reason, each node's latest live view with the jobs running there."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpusched.api.jobs import InvalidJob
from gpusched.store import StoreSettings, read_query

__all__ = ["JOB_STATES", "NODE_STATES", "NodeRow", "QueueRow", "list_nodes", "list_queue"]

JobState = Literal["pending", "running"]
NodeState = Literal["on", "parked", "waking", "unhealthy"]
JOB_STATES: tuple[JobState, ...] = ("pending", "running")
NODE_STATES: tuple[NodeState, ...] = ("on", "parked", "waking", "unhealthy")
_PENDING_STEPS = ("submitted", "preempted", "requeued")
_RUNNING_STEPS = ("placed", "running")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


@dataclass(frozen=True, slots=True)
class QueueRow:
    job_id: str
    tenant: str
    priority_class: str
    gpus: float
    state: JobState
    since: str  # when it entered this state (UTC)
    wait_s: float  # pending: seconds since it last became pending; running: 0
    nodes: list[str]
    score: float | None  # the processor's latest priority score (lower runs first)
    pending_reason: str | None
    estimated_start: str | None  # UTC; the core's estimate, when it can give one
    components: dict[str, float]  # the named terms of the score (pending jobs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class NodeRow:
    node_id: str
    gpu_model: str
    gpus_total: int
    gpus_free: float
    power_state: str
    healthy: bool
    jobs: list[str]
    stale_gpus: int = 0  # GPUs whose telemetry stopped
    error_gpus: int = 0  # other GPUs not allocatable: uncorrected ECC errors

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _name(field: str, value: str | None) -> str | None:
    if value is not None and not _NAME.match(value):
        raise InvalidJob(field, "letters, digits and . _ : - only, at most 128")
    return value


def _steps(names: tuple[str, ...]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def list_queue(
    store: StoreSettings | None = None,
    state: JobState | None = None,
    tenant: str | None = None,
    priority_class: str | None = None,
    limit: int = 1000,
) -> list[QueueRow]:
    """Jobs not ended, pending first (by priority score), then running."""
    where = [f"state IN ({_steps(_PENDING_STEPS + _RUNNING_STEPS)})"]
    if state is not None:
        where.append(
            f"state IN ({_steps(_PENDING_STEPS if state == 'pending' else _RUNNING_STEPS)})"
        )
    if _name("tenant", tenant) is not None:
        where.append(f"tenant = '{tenant}'")
    if _name("priority_class", priority_class) is not None:
        where.append(f"priority_class = '{priority_class}'")
    rows = read_query(
        f"""
        SELECT j.job_id, tenant, priority_class, gpus, state, toString(since),
               toUnixTimestamp64Milli(since) / 1000, nodes, p.score, p.reason, p.start,
               p.components
        FROM (
            SELECT job_id,
                   argMax(type, (ts, type = 'running')) AS state,
                   argMax(node_ids, (ts, type = 'running')) AS nodes,
                   max(ts) AS since,
                   anyIf(tenant, type = 'submitted') AS tenant,
                   anyIf(priority_class, type = 'submitted') AS priority_class,
                   anyIf(num_gpu, type = 'submitted') AS gpus
            FROM job_events FINAL GROUP BY job_id
        ) AS j
        LEFT JOIN (
            SELECT job_id, argMax(score, ts) AS score, argMax(pending_reason, ts) AS reason,
                   argMax(estimated_start, ts) AS start, argMax(components, ts) AS components
            FROM priorities FINAL GROUP BY job_id
        ) AS p ON p.job_id = j.job_id
        WHERE {" AND ".join(where)}
        ORDER BY state IN ({_steps(_RUNNING_STEPS)}), p.score, since
        LIMIT {int(limit)}
        """,
        store,
    ).rows
    now = time.time()
    out = []
    for job_id, ten, cls, gpus, step, since, since_s, nodes, score, reason, start, parts in rows:
        pending = step in _PENDING_STEPS
        out.append(
            QueueRow(
                job_id=str(job_id),
                tenant=str(ten),
                priority_class=str(cls),
                gpus=float(gpus or 0.0),
                state="pending" if pending else "running",
                since=str(since),
                wait_s=max(now - float(since_s), 0.0) if pending else 0.0,
                nodes=[] if pending else list(nodes),
                score=None if score is None or not pending else float(score),
                # The processor stops updating a job once it runs: its last reason is old.
                pending_reason=str(reason) if reason and pending else None,
                estimated_start=str(start) if start and pending else None,
                components={str(k): float(v) for k, v in (parts or {}).items()} if pending else {},
            )
        )
    return out


def list_nodes(store: StoreSettings | None = None, state: NodeState | None = None) -> list[NodeRow]:
    """Every node's latest live view, with the jobs the record says run there."""
    having = ""
    if state == "unhealthy":
        having = "HAVING NOT healthy"
    elif state is not None:
        having = f"HAVING power_state = '{state}'"
    rows = read_query(
        f"""
        SELECT node_id, argMax(gpu_model, ts) AS gpu_model, argMax(gpus_total, ts),
               argMax(gpus_allocatable, ts) - argMax(gpus_allocated, ts),
               argMax(power_state, ts) AS power_state, argMax(healthy, ts) AS healthy,
               length(argMax(stale_gpus, ts)), argMax(gpus_total - gpus_allocatable, ts)
        FROM node_views FINAL GROUP BY node_id {having} ORDER BY node_id
        """,
        store,
    ).rows
    running: dict[str, list[str]] = {}
    for job in list_queue(store, state="running", limit=100_000):
        for node in job.nodes:
            running.setdefault(node, []).append(job.job_id)
    return [
        NodeRow(str(n), str(m), int(total), round(float(free), 3), str(power), bool(ok),
                running.get(str(n), []), int(stale), max(round(float(out)) - int(stale), 0))
        for n, m, total, free, power, ok, stale, out in rows
    ]  # fmt: skip
