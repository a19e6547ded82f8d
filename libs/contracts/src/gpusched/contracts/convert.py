"""Between the contract's events and the core's values, written once: the dispatcher and
the processor both build core jobs from job events."""

from __future__ import annotations

from gpusched.contracts.errors import ContractError
from gpusched.contracts.events import JobEvent, JobRequest
from gpusched.core import Job, Request

__all__ = ["core_job", "core_request", "job_request", "submitted_job"]


def core_request(request: JobRequest) -> Request:
    return Request(
        request.num_gpu, frozenset(request.gpu_models), request.cpu_milli, request.memory_mib
    )


def job_request(request: Request) -> JobRequest:
    """The contract's form of a core request (a job that arrived through the cluster)."""
    return JobRequest(
        num_gpu=request.num_gpu,
        gpu_models=tuple(sorted(request.gpu_models)),
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )


def core_job(
    job_id: str,
    request: JobRequest,
    submitted_at: float,
    tenant: str,
    priority_class: str,
    executed_s: float = 0.0,
    preemptions: int = 0,
) -> Job:
    """A core job (pending) with the service it has had so far."""
    core = core_request(request)
    return Job(
        job_id,
        core,
        submitted_at,
        tenant,
        priority_class,
        executed_s=executed_s,
        attained_gpu_s=executed_s * core.num_gpu,
        preemptions=preemptions,
    )


def submitted_job(event: JobEvent) -> Job:
    """The core job of a 'submitted' event (the contract guarantees its request)."""
    if event.request is None:
        raise ContractError(f"job event {event.event_id} ({event.type}) carries no request")
    return core_job(
        event.job_id, event.request, event.ts.timestamp(), event.tenant, event.priority_class
    )
