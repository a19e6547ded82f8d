"""Submitting work and asking about it: validation, the jobs topic, the store.

Shared by the REST API (``gpusched api``) and the CLI (``gpusched submit | status``).
A job is validated against the contract (``JobRequest``) and against the cluster as the
processor's live view knows it (the latest ``node_views`` in the store): a GPU model no
node has, or a gang larger than every node that has the model, is refused naming the
field. Accepted jobs are published to the jobs topic (acks=all) before the caller gets
the job id.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusched.contracts import JobEvent, JobEventType, JobRequest, encode
from gpusched.contracts.producer import Producer
from gpusched.contracts.settings import KafkaSettings, client_options
from gpusched.contracts.topics import JOBS
from gpusched.core import Params
from gpusched.store import StoreError, StoreSettings, read_query

__all__ = [
    "EventLogUnreachable",
    "InvalidJob",
    "JobStatus",
    "SubmitJob",
    "cluster_models",
    "job_status",
    "publish",
]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class EventLogUnreachable(ConnectionError):
    """Kafka did not take the events in time: nothing may be assumed accepted."""

    def __init__(self, bootstrap: str, why: str) -> None:
        super().__init__(
            f"the event log (Kafka) at {bootstrap} is unreachable ({why}); is the platform "
            "up? (make run, or make kafka-up)"
        )
        self.bootstrap = bootstrap


def kafka_failure(exc: BaseException, timeout_s: float) -> str:
    """Why a send failed, in words (a timeout has no message of its own)."""
    if isinstance(exc, TimeoutError):
        return f"no acknowledgement within {timeout_s:g} s"
    return str(exc) or type(exc).__name__


class InvalidJob(ValueError):
    """A submission the platform refuses; ``field`` names what was wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class SubmitJob(BaseModel):
    """A job to run: a gang of whole GPUs, or a share (< 1) of one. Unknown fields are
    refused (a misspelt ``gpu_modle`` must not silently mean "any model")."""

    model_config = ConfigDict(extra="forbid")

    gpus: float = Field(ge=0, le=4096, description="GPUs at once (0 < x < 1: a share of one)")
    gpu_model: str | None = Field(default=None, description="e.g. V100; empty: any model")
    tenant: str = Field(default="default", min_length=1, max_length=128)
    priority_class: str = Field(default="normal", min_length=1, max_length=64)
    cpu_milli: int = Field(default=0, ge=0, le=10_000_000)
    memory_mib: int = Field(default=0, ge=0, le=100_000_000)
    job_id: str | None = Field(default=None, description="default: a new id")

    def event(self, models: dict[str, int] | None, actor: str | None = None) -> JobEvent:
        """The 'submitted' event (asked for by ``actor``), or ``InvalidJob`` naming the
        field at fault."""
        job_id = self.job_id or f"job-{uuid.uuid4().hex[:12]}"
        if not _ID.match(job_id):
            raise InvalidJob("job_id", "letters, digits and . _ : - only, at most 128")
        classes = Params().qos_classes
        if self.priority_class not in classes:
            raise InvalidJob(
                "priority_class", f"unknown; one of {', '.join(c for c in classes if c)}"
            )
        try:
            request = JobRequest(
                num_gpu=self.gpus,
                gpu_models=(self.gpu_model,) if self.gpu_model else (),
                cpu_milli=self.cpu_milli,
                memory_mib=self.memory_mib,
            )
        except ValidationError as exc:
            raise InvalidJob("gpus", exc.errors()[0]["msg"]) from exc
        if models:
            _fits(request, models)
        return JobEvent(
            job_id=job_id,
            type=JobEventType.SUBMITTED,
            tenant=self.tenant,
            priority_class=self.priority_class,
            request=request,
            actor=actor,
        )


def _fits(request: JobRequest, models: dict[str, int]) -> None:
    wanted = request.gpu_models or tuple(models)
    known = [m for m in wanted if m in models]
    if not known:
        raise InvalidJob(
            "gpu_model", f"no node has {'|'.join(wanted)}; models: {', '.join(sorted(models))}"
        )
    largest = max(models[m] for m in known)
    if request.num_gpu > largest:
        raise InvalidJob(
            "gpus",
            f"a gang of {request.num_gpu:g} GPUs must fit on one node; the largest "
            f"{'|'.join(known)} node has {largest}",
        )


def cluster_models(store: StoreSettings | None = None) -> dict[str, int]:
    """GPU model -> GPUs of the largest node of that model, from the live view; empty when
    the store has no view yet (then only the contract is checked)."""
    try:
        answer = read_query(
            "SELECT gpu_model, max(gpus_total) AS most FROM node_views FINAL "
            "GROUP BY gpu_model HAVING most > 0",  # nodes without GPUs have no model
            store,
        )
    except StoreError:
        return {}
    return {str(m): int(n) for m, n in answer.rows}


async def publish(
    kafka: KafkaSettings | str, prefix: str, events: list[JobEvent], timeout_s: float = 10.0
) -> None:
    """Publish job events and wait until the broker has them all;
    ``EventLogUnreachable`` when it does not within ``timeout_s``."""
    producer = Producer(kafka, delivery_timeout_s=timeout_s)

    async def send_all() -> None:
        sent = [
            await producer.send(JOBS.name(prefix), encode(event), key=event.job_id.encode())
            for event in events
        ]
        await producer.delivered(sent)

    try:
        await asyncio.wait_for(send_all(), timeout_s)
    except (TimeoutError, KafkaError) as exc:
        await producer.discard("not acknowledged in time")  # so they do not arrive later
        where = client_options(kafka)["bootstrap_servers"]
        raise EventLogUnreachable(where, kafka_failure(exc, timeout_s)) from exc
    finally:
        await producer.stop()


@dataclass(frozen=True, slots=True)
class JobStatus:
    job_id: str
    tenant: str  # "" when the store has its later steps but not its submission
    state: str  # the last lifecycle step recorded: submitted, running, finished, ...
    node_ids: list[str]
    since: str
    priority: dict[str, Any] | None  # score, components, pending_reason, policy

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "tenant": self.tenant,
            "state": self.state,
            "node_ids": self.node_ids,
            "since": self.since,
            "priority": self.priority,
        }


def job_status(job_id: str, store: StoreSettings | None = None) -> JobStatus | None:
    """What the store knows of a job: its last step, where it runs, its latest priority."""
    if not _ID.match(job_id):
        raise InvalidJob("job_id", "letters, digits and . _ : - only, at most 128")
    steps = read_query(
        "SELECT type, node_ids, toString(ts), "
        f"(SELECT any(tenant) FROM job_events WHERE job_id = '{job_id}' AND type = 'submitted') "
        f"FROM job_events FINAL WHERE job_id = '{job_id}' "
        "ORDER BY ts DESC, type = 'running' DESC LIMIT 1",
        store,
    ).rows
    if not steps:
        return None
    state, node_ids, since, tenant = steps[0]
    rows = read_query(
        "SELECT score, components, pending_reason, policy FROM priorities FINAL "
        f"WHERE job_id = '{job_id}' ORDER BY ts DESC LIMIT 1",
        store,
    ).rows
    priority = None
    if rows:
        score, components, reason, policy = rows[0]
        # The processor stops updating a job once it runs or ends: its last reason is old.
        kind = JobEventType(state)
        waiting = kind is JobEventType.SUBMITTED or kind.requeues
        priority = {
            "score": score,
            "components": dict(components),
            "pending_reason": reason if waiting else None,
            "policy": policy,
        }
    return JobStatus(job_id, str(tenant or ""), str(state), list(node_ids), str(since), priority)


def job_history(job_id: str, store: StoreSettings | None = None) -> dict[str, list[dict[str, Any]]]:
    """A job's lifecycle (every event, oldest first, with who asked), its priority
    history (score, why it waited, the parameter revision in force) and its GPU energy
    (telemetry samples taken while it held a GPU)."""
    if not _ID.match(job_id):
        raise InvalidJob("job_id", "letters, digits and . _ : - only, at most 128")
    queries = {
        "events": "SELECT toString(ts) AS ts, type, node_ids, actor, reason FROM job_events FINAL "
        f"WHERE job_id = '{job_id}' ORDER BY ts, type = 'running'",
        "priorities": "SELECT toString(ts) AS ts, round(score, 4) AS score, pending_reason, "
        "estimated_start, params_revision FROM priorities FINAL "
        f"WHERE job_id = '{job_id}' ORDER BY ts DESC LIMIT 200",
        "energy": "SELECT round(sum(interval_s) / 3600, 3) AS gpu_hours, "
        "round(sum(power_w * interval_s) / 3.6e6, 4) AS energy_kwh "
        f"FROM telemetry FINAL WHERE job_id = '{job_id}'",
    }
    out = {}
    for name, sql in queries.items():
        answer = read_query(sql, store)
        out[name] = [dict(zip(answer.columns, row, strict=True)) for row in answer.rows]
    return out
