"""The event log goes away under the API and the CLI: they answer clearly within a bound
and recover by themselves. A broker of its own (started here, SIGKILLed, restarted on
the same data directory), so the session's broker is never touched."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpusched.contracts.provision import ensure_topics
from gpusched.local.kafka import LocalBroker
from tests.pipeline import Pipeline, free_port

pytestmark = [pytest.mark.slow]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    own = LocalBroker(state_dir=tmp_path / "kafka", port=free_port())
    own.up()
    try:
        yield own
    finally:
        own.down()


def test_api_answers_503_while_kafka_is_down_and_recovers(
    broker: LocalBroker, tmp_path: Path
) -> None:
    prefix = "outage."
    ensure_topics(broker.bootstrap, prefix)
    p = Pipeline(broker.bootstrap, prefix, tmp_path)
    try:
        base = p.start_api(GPUSCHED_API_KAFKA_TIMEOUT_S="3")
        token = p.token("--role", "admin", "--name", "ops")
        auth = {"Authorization": f"Bearer {token}"}

        def submit() -> httpx.Response:
            return httpx.post(f"{base}/jobs", json={"gpus": 1}, headers=auth, timeout=30)

        assert submit().status_code == 201
        assert httpx.get(f"{base}/readyz").json()["kafka"]["state"] == "up"

        os.kill(int(broker.pid_file.read_text()), signal.SIGKILL)
        started = time.monotonic()
        refused = submit()
        took = time.monotonic() - started
        assert refused.status_code == 503, refused.text
        assert took < 3 + 2, f"answered after {took:.1f} s; the bound is 3 s"
        assert refused.headers["retry-after"] == "5"
        assert "event log" in refused.json()["detail"]
        assert broker.bootstrap in refused.json()["detail"]
        ready = httpx.get(f"{base}/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.json()["kafka"]["state"] == "down"
        # the CLI says which dependency failed and what to do, exit 1, no object repr
        said = p.run_failing("submit", "--gpus", "1")
        assert f"the event log (Kafka) at {broker.bootstrap} is unreachable" in said
        assert "object at 0x" not in said

        broker.up()  # the same data directory: the topics are still there
        p.wait_for("the API to accept jobs again", lambda: submit().status_code == 201, 90)
        assert httpx.get(f"{base}/readyz").json()["kafka"]["state"] == "up"
        # one line when the event log went away, one when it came back: not one per retry
        log = p.log("api")
        assert log.count("the event log (Kafka) at") == 2, log[-3000:]
        assert "is unreachable" in log
        assert "is back after" in log
    finally:
        p.stop()
