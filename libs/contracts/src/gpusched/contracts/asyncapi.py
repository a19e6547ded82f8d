"""Builds the AsyncAPI 3 document of the gpusched topics from the event models."""

from __future__ import annotations

import json
from typing import Any

from gpusched.contracts.codec import DeadLetter
from gpusched.contracts.topics import TOPICS

__all__ = ["asyncapi_document", "asyncapi_json"]

_REF_TEMPLATE = "#/components/schemas/{model}"


def _hoist(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """Move a model schema's $defs into components.schemas and return the rest."""
    for name, sub in schema.pop("$defs", {}).items():
        schemas[name] = sub
    return schema


def asyncapi_document() -> dict[str, Any]:
    """The AsyncAPI 3.0 document: one channel, message and schema per topic and its DLQ."""
    schemas: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    dlq_schema = _hoist(DeadLetter.model_json_schema(ref_template=_REF_TEMPLATE), schemas)
    schemas["DeadLetter"] = dlq_schema
    messages["DeadLetter"] = {
        "name": "DeadLetter",
        "contentType": "application/json",
        "payload": {"$ref": "#/components/schemas/DeadLetter"},
    }
    for topic in TOPICS:
        model = topic.model.__name__
        schemas[model] = _hoist(topic.model.model_json_schema(ref_template=_REF_TEMPLATE), schemas)
        messages[model] = {
            "name": model,
            "contentType": "application/json",
            "summary": (topic.model.__doc__ or "").strip().splitlines()[0],
            "bindings": {"kafka": {"key": {"type": "string", "description": topic.key_field}}},
            "payload": {"$ref": f"#/components/schemas/{model}"},
        }
        channel_id = topic.base.replace(".", "_")
        channels[channel_id] = {
            "address": topic.base,
            "description": topic.description,
            "messages": {model: {"$ref": f"#/components/messages/{model}"}},
        }
        channels[f"{channel_id}_dlq"] = {
            "address": topic.dlq(),
            "description": f"messages rejected from {topic.base}, with the reason",
            "messages": {"DeadLetter": {"$ref": "#/components/messages/DeadLetter"}},
        }
        operations[f"receive_{channel_id}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{channel_id}"},
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "gpusched events",
            "version": "1.0.0",
            "description": "Topics and event schemas of gpusched. JSON, schema_version 1.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }


def asyncapi_json() -> str:
    """The document as stable, pretty JSON (what is committed)."""
    return json.dumps(asyncapi_document(), indent=2, sort_keys=True) + "\n"
