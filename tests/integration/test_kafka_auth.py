"""The local broker with authentication (SASL/SCRAM) and ACLs: only the principals that
hold a grant write the control and jobs topics, and the services run with their
credentials from settings. A broker of its own, so the session's broker is untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from gpusched.contracts import ControlParameter, KafkaSettings, encode
from gpusched.contracts.provision import ensure_topics
from gpusched.contracts.settings import client_options
from gpusched.contracts.topics import CONTROL, JOBS, TELEMETRY
from gpusched.local.kafka import LocalBroker
from tests.pipeline import Pipeline, free_ports

pytestmark = [pytest.mark.slow]

PREFIX = "sec."


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    own = LocalBroker(state_dir=tmp_path_factory.mktemp("kafka"), port=free_ports(2), auth=True)
    own.up()
    try:
        ensure_topics(own.settings(), PREFIX)
        own.grant(PREFIX)
        yield own
    finally:
        own.down()


async def _produce(kafka: KafkaSettings | str, topic: str) -> Exception | None:
    """Send one control message to ``topic``; the error, or None when it was accepted."""
    producer = AIOKafkaProducer(**client_options(kafka), request_timeout_ms=5000)
    value = encode(ControlParameter(name="dynamic_qos_factor", value=5.0))
    try:
        await asyncio.wait_for(producer.start(), 10)
        await asyncio.wait_for(producer.send_and_wait(topic, value, key=b"k"), 10)
    except (KafkaError, TimeoutError) as exc:
        return exc
    finally:
        await producer.stop()
    return None


def test_only_granted_principals_write_the_control_topic(broker: LocalBroker) -> None:
    control, telemetry = CONTROL.name(PREFIX), TELEMETRY.name(PREFIX)

    def produce(kafka: KafkaSettings | str, topic: str = control) -> Exception | None:
        return asyncio.run(_produce(kafka, topic))

    # no credentials: the listener does not even talk to the client
    assert produce(broker.bootstrap) is not None
    wrong = broker.settings("gpusched-reader").model_copy(
        update={"kafka_sasl_password": broker.settings("admin").kafka_sasl_password}
    )
    assert produce(wrong) is not None
    # authenticated, but no grant to write
    assert isinstance(produce(broker.settings("gpusched-reader")), TopicAuthorizationFailedError)
    assert isinstance(
        produce(broker.settings("gpusched-api"), telemetry), TopicAuthorizationFailedError
    )
    # granted
    assert produce(broker.settings("gpusched-api")) is None
    assert produce(broker.settings("gpusched-api"), JOBS.name(PREFIX)) is None
    assert produce(broker.settings("gpusched-services"), telemetry) is None


def test_services_run_with_their_credentials(broker: LocalBroker, tmp_path: Path) -> None:
    """The sink, the processor (Faust) and the API, each as its principal: a job goes in
    through the API and reaches the store, and a parameter change is applied."""
    p = Pipeline(broker.bootstrap, PREFIX, tmp_path)
    services = broker.client_env("gpusched-services")
    try:
        p.start("sink", **services)
        p.wait_for("the sink's SQL endpoint", lambda: p.scalar("SELECT 1") == 1, 60)
        p.start("process", **services)
        base = p.start_api(**broker.client_env("gpusched-api"))
        token = p.token("--role", "admin", "--name", "ops")
        auth = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{base}/jobs", json={"gpus": 1}, headers=auth, timeout=30)
        assert job.status_code == 201, job.text
        p.wait_for(
            "the job in the store",
            lambda: p.scalar("SELECT count() FROM job_events WHERE actor = 'ops'") == 1,
            timeout=60,
        )
        change = {"changes": {"dynamic_qos_factor": 20}, "reason": "auth test", "revision": 0}
        assert httpx.patch(f"{base}/params", json=change, headers=auth, timeout=30).is_success
        p.wait_for(
            "the processor to apply the change",
            lambda: "processor" in httpx.get(f"{base}/params", headers=auth).json()["applied_at"],
            timeout=90,
        )
    finally:
        p.stop()
