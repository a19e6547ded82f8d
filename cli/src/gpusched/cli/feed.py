"""``gpusched feed``: submit a trace's jobs to the jobs topic, time-compressed.

Live load for ``make run``: each trace job is submitted (with its trace id, so the
simulated cluster runs it for its trace duration) after the trace's inter-arrival time
divided by ``--speed``; a gap longer than ``--max-gap-s`` of wall time is cut to that.
The trace's durations are not sent: only the cluster reads them. Unless ``--from-start``,
the feed skips the trace's quiet lead-in (``busy_start``), so that a new platform is busy
within a minute.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gpusched.contracts import JobEvent, JobEventType, JobRequest, KafkaSettings, encode
from gpusched.contracts.producer import Producer
from gpusched.contracts.topics import JOBS
from gpusched.sim import SimError, load_jobs

__all__ = ["busy_start", "feed"]

_WINDOW = 50  # arrivals: the span of this many measures how busy the trace is


def busy_start(submit_times: list[float], window: int = _WINDOW) -> int:
    """The index of the first job from which ``window`` arrivals take no longer than the
    trace's median span of ``window`` arrivals: where the trace is as busy as it usually
    is (0 for a trace shorter than the window). openb_default: job 366, after 2,828 quiet
    hours of a 3,584-hour trace."""
    spans = [submit_times[i + window] - submit_times[i] for i in range(len(submit_times) - window)]
    if not spans:
        return 0
    typical = statistics.median(spans)
    return next(i for i, span in enumerate(spans) if span <= typical)


async def _feed(
    settings: KafkaSettings,
    path: Path,
    speed: float,
    max_gap_s: float,
    limit: int | None,
    from_start: bool,
) -> int:
    jobs = load_jobs(path)
    skip = 0 if from_start else busy_start([j.submit_time for j in jobs])
    if skip:
        quiet_h = (jobs[skip].submit_time - jobs[0].submit_time) / 3600
        typer.echo(f"skipping the trace's quiet lead-in: {skip} jobs, {quiet_h:,.0f} h")
    jobs = jobs[skip:][:limit]
    producer = Producer(settings)
    topic = JOBS.name(settings.topic_prefix)
    queued: list[asyncio.Future[Any]] = []
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
            queued.append(await producer.send(topic, encode(event), key=job.job_id.encode()))
        await producer.delivered(queued)
    finally:
        await producer.stop()
    return len(queued)


def feed(
    jobs: Annotated[Path, typer.Option(help="a *.jobs.csv trace")],
    speed: Annotated[float, typer.Option(help="divide inter-arrival times by this")] = 600.0,
    max_gap_s: Annotated[float, typer.Option(help="longest wait between two jobs (s)")] = 5.0,
    limit: Annotated[int | None, typer.Option(help="submit only the first N jobs")] = None,
    from_start: Annotated[
        bool, typer.Option(help="also feed the trace's quiet lead-in (default: skip it)")
    ] = False,
) -> None:
    """Submit a trace's jobs to the jobs topic, time-compressed (live load)."""
    started = time.monotonic()
    try:
        sent = asyncio.run(_feed(KafkaSettings(), jobs, speed, max_gap_s, limit, from_start))
    except SimError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{sent} jobs submitted in {time.monotonic() - started:.0f} s")
