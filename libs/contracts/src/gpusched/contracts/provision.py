"""Creating the topics of the contract on a broker, as ``topics.yaml`` declares them.

``topics.yaml`` ships inside this package, so an installed wheel (a container image) finds
it; a path argument overrides it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from gpusched.contracts.errors import ProvisionError
from gpusched.contracts.settings import KafkaSettings, client_options
from gpusched.contracts.topics import DLQ_SUFFIX, Topic

__all__ = [
    "TopicSpec",
    "declared_partitions",
    "ensure_internal_topic",
    "ensure_topics",
    "topic_specs",
]


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    cleanup_policy: str
    retention_ms: int

    def configs(self) -> dict[str, str]:
        return {"cleanup.policy": self.cleanup_policy, "retention.ms": str(self.retention_ms)}


def _declarations(path: Path | None) -> dict[str, Any]:
    text = (
        path.read_text()
        if path is not None
        else resources.files("gpusched.contracts").joinpath("topics.yaml").read_text()
    )
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def topic_specs(prefix: str = "", path: Path | None = None) -> list[TopicSpec]:
    """Every declared topic, and its dead-letter topic, under ``prefix``."""
    doc = _declarations(path)
    dlq = doc["dlq"]
    specs: list[TopicSpec] = []
    for t in doc["topics"]:
        name = prefix + t["name"]
        specs.append(TopicSpec(name, t["partitions"], t["cleanup_policy"], t["retention_ms"]))
        specs.append(
            TopicSpec(
                name + DLQ_SUFFIX, dlq["partitions"], dlq["cleanup_policy"], dlq["retention_ms"]
            )
        )
    return specs


async def ensure_internal_topic(kafka: KafkaSettings | str, name: str, like: Topic) -> None:
    """Create a service's internal topic ``name`` where missing: one partition, compacted,
    with as many replicas as the contract topic ``like`` has on this broker."""
    admin = AIOKafkaAdminClient(**client_options(kafka), request_timeout_ms=10_000)
    await admin.start()
    try:
        prefix = kafka.topic_prefix if isinstance(kafka, KafkaSettings) else ""
        described = await admin.describe_topics([like.name(prefix)])
        partitions = described[0].get("partitions") or [{"replicas": [0]}]
        replicas = len(partitions[0]["replicas"])
    finally:
        await admin.close()
    await _create(kafka, [TopicSpec(name, 1, "compact", -1)], 30.0, replicas, None)


def declared_partitions(name: str, path: Path | None = None) -> int:
    """The partition count ``topics.yaml`` declares for the topic ``name`` (no prefix)."""
    for t in _declarations(path)["topics"]:
        if t["name"] == name:
            return int(t["partitions"])
    raise ProvisionError(f"topic {name!r} is not declared in topics.yaml")


async def _create(
    kafka: KafkaSettings | str,
    specs: list[TopicSpec],
    timeout_s: float,
    replication_factor: int,
    min_insync: int | None,
) -> list[str]:
    admin = AIOKafkaAdminClient(**client_options(kafka), request_timeout_ms=10_000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            extra = {} if min_insync is None else {"min.insync.replicas": str(min_insync)}
            response = await admin.create_topics(
                [
                    NewTopic(
                        s.name, s.partitions, replication_factor, topic_configs=s.configs() | extra
                    )
                    for s in missing
                ],
                timeout_ms=int(timeout_s * 1000),
            )
            refused = [
                f"{error[0]}: {error[2] if len(error) > 2 and error[2] else f'code {error[1]}'}"
                for error in response.topic_errors
                if error[1] not in (0, 36)  # none, or TOPIC_ALREADY_EXISTS (a race)
            ]
            if refused:
                raise ProvisionError("the broker refused topics: " + "; ".join(refused))
        # Creation is asynchronous in the controller: wait until metadata shows every topic.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if {s.name for s in specs} <= set(await admin.list_topics()):
                return [s.name for s in missing]
            await asyncio.sleep(0.1)
        raise ProvisionError(f"topics not visible after {timeout_s}s: {[s.name for s in missing]}")
    finally:
        await admin.close()


def ensure_topics(
    kafka: KafkaSettings | str,
    prefix: str = "",
    timeout_s: float = 30.0,
    path: Path | None = None,
    replication_factor: int = 1,
    min_insync: int | None = None,
) -> list[str]:
    """Create the declared topics under ``prefix`` where missing (on the broker of
    ``kafka``: settings, or bootstrap servers without authentication), each with
    ``replication_factor`` replicas and, when given, ``min.insync.replicas``; return those
    created. Existing topics are left as they are."""
    if replication_factor < 1 or (
        min_insync is not None and not 1 <= min_insync <= replication_factor
    ):
        raise ProvisionError(
            f"need 1 <= min.insync.replicas <= replication factor, got {min_insync} and "
            f"{replication_factor}"
        )
    specs = topic_specs(prefix, path)
    return asyncio.run(_create(kafka, specs, timeout_s, replication_factor, min_insync))
