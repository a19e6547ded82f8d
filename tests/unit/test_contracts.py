"""Contracts: codec round trips, errors that name the field, topics and AsyncAPI in sync."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched.contracts import (
    TOPICS,
    GpuTelemetrySample,
    InvalidEvent,
    JobEvent,
    MalformedMessage,
    MessageTooLarge,
    PlacementDecision,
    UnknownSchemaVersion,
    UnknownTopic,
    decode,
    encode,
    topic_for,
)
from gpusched.contracts.asyncapi import asyncapi_json
from gpusched.contracts.provision import topic_specs
from tests.builders import every_event

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("event", every_event(), ids=lambda e: type(e).__name__)
def test_every_event_round_trips(event: object) -> None:
    assert decode(type(event), encode(event)) == event  # type: ignore[arg-type]


def _telemetry_json(**changes: object) -> bytes:
    obj = json.loads(encode(every_event()[0]))
    obj.update(changes)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("changes", "field", "value"),
    [
        ({"utilization_pct": 140}, "utilization_pct", 140),
        ({"power_w": "lots"}, "power_w", "lots"),
        ({"gpu_index": -1}, "gpu_index", -1),
        ({"surprise": 1}, "surprise", 1),
        ({"memory_used_mib": 99999}, "<root>", None),
    ],
)
def test_invalid_event_names_field_and_value(
    changes: dict[str, object], field: str, value: object
) -> None:
    with pytest.raises(InvalidEvent) as err:
        decode(GpuTelemetrySample, _telemetry_json(**changes))
    fields = [f for f, _, _ in err.value.errors]
    assert field in fields
    if value is not None:
        assert (field, value) in [(f, v) for f, v, _ in err.value.errors]
        assert repr(value) in str(err.value)


def test_missing_field_is_named() -> None:
    obj = json.loads(_telemetry_json())
    del obj["gpu_uuid"]
    with pytest.raises(InvalidEvent, match="gpu_uuid"):
        decode(GpuTelemetrySample, json.dumps(obj).encode())


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"{not json", MalformedMessage),
        (b"[1, 2]", MalformedMessage),
        (b"\xff\xfe", MalformedMessage),
        (_telemetry_json(schema_version=2), UnknownSchemaVersion),
        (b"{" + b" " * 2_000_000 + b"}", MessageTooLarge),
    ],
)
def test_bad_bytes_raise_their_error(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode(GpuTelemetrySample, data)


def test_lifecycle_rules() -> None:
    with pytest.raises(InvalidEvent, match="request"):
        decode(JobEvent, b'{"job_id": "j", "type": "submitted"}')
    with pytest.raises(InvalidEvent, match="job_id"):
        decode(PlacementDecision, b'{"epoch": 1, "action": "place", "node_ids": ["n"]}')


def test_topic_lookup() -> None:
    assert topic_for("p.gpusched.jobs.v1.dlq", prefix="p.").model is JobEvent
    with pytest.raises(UnknownTopic):
        topic_for("gpusched.nope.v1")


def test_topics_yaml_declares_exactly_the_contract_topics() -> None:
    # the declarations shipped in the package, found without the checkout
    specs = {s.name: s for s in topic_specs(prefix="p.")}
    assert list(specs)[::2] == [t.name("p.") for t in TOPICS]
    assert list(specs)[1::2] == [t.dlq("p.") for t in TOPICS]
    assert specs["p.gpusched.view.v1"].cleanup_policy == "compact"
    assert specs["p.gpusched.control.v1"].cleanup_policy == "compact"
    assert specs["p.gpusched.jobs.v1.dlq"].configs()["cleanup.policy"] == "delete"


def test_topic_declarations_can_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(
        "dlq: {partitions: 1, cleanup_policy: delete, retention_ms: 1}\n"
        "topics: [{name: t.v1, partitions: 2, cleanup_policy: delete, retention_ms: 5}]\n"
    )
    specs = [(s.name, s.partitions) for s in topic_specs(path=path)]
    assert specs == [("t.v1", 2), ("t.v1.dlq", 1)]


def test_committed_asyncapi_document_is_current() -> None:
    committed = (REPO / "docs/asyncapi.json").read_text()
    assert committed == asyncapi_json(), "docs/asyncapi.json is stale: run `make asyncapi`"


def test_asyncapi_has_a_channel_per_topic_and_dlq() -> None:
    doc = json.loads(asyncapi_json())
    assert doc["asyncapi"].startswith("3.")
    addresses = {c["address"] for c in doc["channels"].values()}
    for topic in TOPICS:
        assert {topic.name(), topic.dlq()} <= addresses
