"""``gpusched feed``: submit a trace's jobs to the jobs topic, time-compressed.

Live load for ``make run``: each trace job is submitted (with its trace id, so the
simulated cluster runs it for its trace duration) after the trace's inter-arrival time
divided by ``--speed``; a gap longer than ``--max-gap-s`` of wall time is cut to that.
The trace's durations are not sent: only the cluster reads them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated

import typer
from aiokafka import AIOKafkaProducer

from gpusched.contracts import JobEvent, JobEventType, JobRequest, KafkaSettings, encode
from gpusched.contracts.topics import JOBS
from gpusched.sim import SimError, load_jobs

__all__ = ["feed"]


async def _feed(
    settings: KafkaSettings, path: Path, speed: float, max_gap_s: float, limit: int | None
) -> int:
    jobs = load_jobs(path)[:limit]
    producer = AIOKafkaProducer(**settings.client_options(), acks="all")
    await producer.start()
    topic = JOBS.name(settings.topic_prefix)
    sent = 0
    try:
        last = jobs[0].submit_time if jobs else 0.0
        for job in jobs:
            await asyncio.sleep(min((job.submit_time - last) / speed, max_gap_s))
            last = job.submit_time
            r = job.request
            event = JobEvent(
                job_id=job.job_id,
                type=JobEventType.SUBMITTED,
                tenant=job.tenant or "default",
                priority_class=job.qos or "normal",
                request=JobRequest(
                    num_gpu=r.num_gpu,
                    gpu_models=tuple(sorted(r.gpu_models)),
                    cpu_milli=r.cpu_milli,
                    memory_mib=r.memory_mib,
                ),
            )
            await producer.send(topic, encode(event), key=job.job_id.encode())
            sent += 1
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def feed(
    jobs: Annotated[Path, typer.Option(help="a *.jobs.csv trace")],
    speed: Annotated[float, typer.Option(help="divide inter-arrival times by this")] = 600.0,
    max_gap_s: Annotated[float, typer.Option(help="longest wait between two jobs (s)")] = 5.0,
    limit: Annotated[int | None, typer.Option(help="submit only the first N jobs")] = None,
) -> None:
    """Submit a trace's jobs to the jobs topic, time-compressed (live load)."""
    started = time.monotonic()
    try:
        sent = asyncio.run(_feed(KafkaSettings(), jobs, speed, max_gap_s, limit))
    except SimError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{sent} jobs submitted in {time.monotonic() - started:.0f} s")
