"""`make run`'s stack loses its Kafka broker (SIGKILL): the API answers 503 within its
bound, the CLI names the event log, the launcher restarts the broker on its data
directory, and every job acknowledged before or after is placed and finished exactly
once; telemetry resumes. `gpusched up` owns the broker here (its own port and folder)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Platform, start_up
from tests.e2e.test_platform import _all_finished, _submit
from tests.pipeline import Pipeline, free_port

pytestmark = [pytest.mark.slow]


def test_broker_sigkill_under_the_platform(tmp_path: Path) -> None:
    kafka_port = free_port()
    p = Pipeline(f"127.0.0.1:{kafka_port}", "", tmp_path)
    kafka_dir = tmp_path / "kafka"
    try:
        api, run_dir = start_up(
            p, nodes=8, KAFKA_BOOTSTRAP_SERVERS="", GPUSCHED_LOCAL_KAFKA_PORT=str(kafka_port),
            GPUSCHED_LOCAL_KAFKA_DIR=str(kafka_dir),
        )  # fmt: skip
        token = p.token("--role", "admin", "--name", "e2e")
        platform = Platform(p, api, run_dir, token)
        before = _submit(platform, "before", 10)
        telemetry = p.scalar("SELECT count() FROM telemetry")

        os.kill(int((kafka_dir / "broker.pid").read_text()), signal.SIGKILL)
        started = time.monotonic()
        with platform.client() as client:
            refused = client.post("/jobs", json={"gpus": 1, "job_id": "during-0"})
        assert refused.status_code == 503, refused.text
        assert time.monotonic() - started < 5 + 2  # GPUSCHED_API_KAFKA_TIMEOUT_S = 5
        assert refused.headers["retry-after"]
        # (the CLI's message while the broker is down: tests/integration/test_outage.py;
        # here the launcher brings the broker back within seconds)

        def kafka_ready() -> bool:
            ready = httpx.get(f"{api}/readyz", timeout=10)
            return bool(ready.json()["kafka"]["state"] == "up")

        p.wait_for("the launcher to restart the broker", kafka_ready, 180)
        assert "the Kafka broker at" in p.log("up")
        probes = iter(range(1000))  # a new id each try: a 503'd one must not come back as 201

        def accepts() -> bool:
            with platform.client() as client:
                body = {"gpus": 1, "job_id": f"probe-{next(probes)}"}
                return client.post("/jobs", json=body).status_code == 201

        p.wait_for("the API to take jobs again", accepts, 60)
        after = _submit(platform, "after", 10)
        _all_finished(platform, "before", before)
        _all_finished(platform, "after", after)
        p.wait_for(
            "telemetry after the restart",
            lambda: p.scalar("SELECT count() FROM telemetry") > telemetry + 100,
            120,
        )
    finally:
        p.stop()
