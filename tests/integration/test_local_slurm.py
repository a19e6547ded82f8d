"""The local Slurm cluster stops everything it started: a job still running when it goes
down leaves no slurmstepd behind (it runs in a session of its own, out of its slurmd's
process group)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from gpusched.local.procs import pid_alive
from gpusched.local.slurm import LocalSlurm, SlurmNode

pytestmark = [pytest.mark.slurm]


def test_down_stops_the_steps_of_running_jobs(tmp_path: Path) -> None:
    slurm = LocalSlurm(tmp_path / "slurm", [SlurmNode("node1", 1)])
    slurm.up()
    try:
        subprocess.run(
            ["sbatch", "--job-name", "left", "--wrap", "sleep 600"],
            env=slurm.env,
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 60
        while not (steps := slurm.steps()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert steps, "the job never started"
    finally:
        slurm.down()
    assert slurm.steps() == []
    assert not any(pid_alive(pid) for pid in steps)
