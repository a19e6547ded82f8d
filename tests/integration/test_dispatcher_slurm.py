"""The dispatcher on a real Slurm cluster: jobs from the jobs topic are placed by the core
onto Slurm nodes (held submission with typed GPUs, released there), run and finish, and
every step is recorded on the jobs topic once."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from gpusched.contracts import JobEvent, JobRequest, decode, encode
from gpusched.contracts.topics import JOBS
from gpusched.local.slurm import LocalSlurm, SlurmNode
from tests.pipeline import Pipeline, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slurm, pytest.mark.slow]


async def _steps(
    bootstrap: str, topic: str, jobs: set[str], within_s: float
) -> dict[str, list[str]]:
    """Every job's recorded steps, once each job has finished (or time is up)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    steps: dict[str, list[str]] = {j: [] for j in jobs}
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    e = decode(JobEvent, r.value or b"")
                    steps.setdefault(e.job_id, []).append(e.type.value)
            if all("finished" in steps[j] for j in jobs):
                break
    finally:
        await consumer.stop()
    return steps


def test_dispatcher_places_jobs_on_slurm(pipeline: Pipeline, tmp_path: Path) -> None:
    slurm = LocalSlurm(tmp_path / "slurm", [SlurmNode("node1", 4), SlurmNode("node2", 4)])
    slurm.up()
    try:
        p = pipeline
        p.start(
            "dispatch",
            "--policy", "dynamic",
            SLURM_CONF=str(slurm.conf),
            GPUSCHED_DISPATCHER_BACKEND="slurm",
            GPUSCHED_DISPATCHER_SLURM_URL=slurm.rest_url,
            GPUSCHED_DISPATCHER_SLURM_TOKEN=slurm.token(),
            GPUSCHED_DISPATCHER_SLURM_JOB_S="2",
        )  # fmt: skip
        jobs = [
            JobEvent(
                job_id=f"s-{i}",
                type="submitted",
                tenant=f"team{i % 2}",
                request=JobRequest(num_gpu=[1, 2, 4][i % 3], gpu_models=("V100",)),
            )
            for i in range(12)
        ]
        produce(p.bootstrap, [(JOBS.name(p.prefix), j.job_id.encode(), encode(j)) for j in jobs])
        ids = {j.job_id for j in jobs}
        steps = asyncio.run(_steps(p.bootstrap, JOBS.name(p.prefix), ids, within_s=120))
        for job_id in ids:
            assert steps[job_id] == ["submitted", "placed", "running", "finished"], (
                job_id,
                steps[job_id],
                p.log("dispatch")[-3000:],
            )
        shown = subprocess.run(
            ["scontrol", "show", "job", "-d"], env=slurm.env, capture_output=True, text=True
        ).stdout
        assert "TresPerJob=gres:gpu:v100:4" in shown  # typed GPUs, as placed
        assert "JobName=s-2" in shown
    finally:
        slurm.down()
