"""The event log goes away under the API and the CLI: they answer clearly within a bound
and recover by themselves. A broker of its own (started here, SIGKILLed, restarted on
the same data directory), so the session's broker is never touched."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError, KafkaTimeoutError

from gpusched.contracts.producer import Producer
from gpusched.contracts.provision import ensure_topics
from gpusched.contracts.topics import JOBS
from gpusched.local.kafka import LocalBroker
from tests.pipeline import Pipeline, free_port, free_ports, write_cluster

pytestmark = [pytest.mark.slow]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    own = LocalBroker(state_dir=tmp_path / "kafka", port=free_ports(2))
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


def test_every_service_says_once_that_the_event_log_went_and_came_back(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """Each long-running service logs one line when the broker goes and one when it is
    back, and its GET /healthz says so meanwhile (503 naming the event log, then 200)."""
    prefix = "outage2."
    ensure_topics(broker.bootstrap, prefix)
    p = Pipeline(broker.bootstrap, prefix, tmp_path)
    cluster = write_cluster(tmp_path / "c.cluster.csv", nodes=4, gpus_per_node=8)
    sim_port = free_port()
    health: dict[str, str] = {}

    def start(name: str, *args: str, **env: str) -> None:
        port = free_port()
        health[name] = f"http://127.0.0.1:{port}/healthz"
        p.start(name, *args, GPUSCHED_HEALTH_PORT=str(port), **env)

    def states() -> dict[str, int]:
        codes = {}
        for name, url in health.items():
            try:
                codes[name] = httpx.get(url, timeout=5).status_code
            except httpx.HTTPError:
                codes[name] = 0
        return codes

    try:
        start("sink")
        start("process")
        start("forecast", "serve")
        p.start("simcluster", "--cluster", str(cluster), "--port", str(sim_port))
        sim = f"http://127.0.0.1:{sim_port}"
        p.wait_for("the simulated cluster", lambda: httpx.get(f"{sim}/info").is_success, 60)
        start("dispatch", GPUSCHED_DISPATCHER_SIM_URL=sim)
        start("collect", "--source", "simulated", "--cluster", str(cluster), "--interval", "1")
        p.wait_for("every service healthy", lambda: set(states().values()) == {200}, 90)

        os.kill(int(broker.pid_file.read_text()), signal.SIGKILL)
        down = datetime.now() + timedelta(seconds=1)  # the services log in local time
        p.wait_for("every service to report the event log down",
                   lambda: set(states().values()) == {503}, 60)  # fmt: skip
        report = httpx.get(health["sink"], timeout=5).json()
        assert report["status"] == "degraded"
        assert report["dependencies"]["the event log (Kafka)"]["state"] == "down"
        assert report["dependencies"]["the store (ClickHouse)"]["state"] == "up"
        time.sleep(10)  # long enough for many retries: still one line each

        restarted = datetime.now()
        broker.up()
        p.wait_for("every service healthy again", lambda: set(states().values()) == {200}, 90)
        for name in health:
            log = p.log(name)
            went = log.count(f"the event log (Kafka) at {broker.bootstrap} is unreachable")
            back = log.count(f"the event log (Kafka) at {broker.bootstrap} is back after")
            assert (went, back) == (1, 1), (name, log[-3000:])
            # not a line per retry while it is away (the group's rejoin once it is back
            # may say a few things once)
            noise = [
                line
                for line in log.splitlines()
                if ("ERROR" in line or "WARNING" in line) and down < _logged_at(line) < restarted
            ]
            assert len(noise) <= 2, (name, noise)
    finally:
        p.stop()


def _logged_at(line: str) -> datetime:
    """When a log line was written (our services' format and Faust's); 'never' if none."""
    found = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
    if found is None:
        return datetime.min
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S") + timedelta(
        milliseconds=int(found.group(2))
    )


def test_the_idempotent_producer_bounds_every_wait_and_starts_again(
    broker: LocalBroker,
) -> None:
    """aiokafka's idempotent producer would wait for the broker without end (a send's
    future, and stop()); ours fails a record not acknowledged within the delivery timeout,
    drops it (it does not arrive later), closes within the close timeout, and sends again
    with a new producer once the broker is back."""
    prefix = "outage3."
    ensure_topics(broker.bootstrap, prefix)
    topic = JOBS.name(prefix)

    async def scenario() -> list[bytes]:
        producer = Producer(broker.bootstrap, delivery_timeout_s=3.0, close_timeout_s=2.0)
        stuck = Producer(broker.bootstrap, delivery_timeout_s=60.0, close_timeout_s=2.0)
        await producer.send_and_wait(topic, b"before", key=b"k")
        await stuck.send_and_wait(topic, b"stuck-before", key=b"s")
        assert producer.generation == 1

        os.kill(int(broker.pid_file.read_text()), signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            await producer.send_and_wait(topic, b"during", key=b"k")
        assert time.monotonic() - started < 3 + 3
        left = await stuck.send(topic, b"stuck-during", key=b"s")
        started = time.monotonic()
        await stuck.stop()  # the record cannot be delivered: it fails after 2 s
        assert time.monotonic() - started < 2 + 2 + 3
        assert isinstance(left.exception(), KafkaTimeoutError)
        with pytest.raises(KafkaError):  # no producer starts while the broker is down
            await Producer(broker.bootstrap).send(topic, b"never", key=b"n")

        await asyncio.to_thread(broker.up)
        await producer.send_and_wait(topic, b"after", key=b"k")
        assert producer.generation == 2  # a new producer (a new producer id)
        pending = await producer.send(topic, b"last", key=b"k")
        await producer.stop()  # delivers what is queued first
        assert pending.done()
        assert pending.exception() is None
        return await _values(broker.bootstrap, topic, 4)

    # what failed did not arrive once the broker was back
    values = asyncio.run(scenario())
    assert sorted(values) == [b"after", b"before", b"last", b"stuck-before"]


async def _values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` values of ``topic``, and a second more to show there are none
    beyond them."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            while len(values) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value or b"" for r in records]
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            values += [r.value or b"" for r in records]
    finally:
        await consumer.stop()
    return values
