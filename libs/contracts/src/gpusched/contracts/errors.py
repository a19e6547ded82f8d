"""The contracts package's exceptions: one hierarchy, each naming what was wrong."""

from __future__ import annotations

__all__ = [
    "ContractError",
    "InvalidEvent",
    "MalformedMessage",
    "MessageTooLarge",
    "ProvisionError",
    "UnknownSchemaVersion",
    "UnknownTopic",
]


class ContractError(Exception):
    """Base of every error raised while encoding or decoding a gpusched event."""


class UnknownTopic(ContractError):
    """A topic name that is not part of the contract."""


class MalformedMessage(ContractError):
    """The bytes are not a JSON object."""


class MessageTooLarge(ContractError):
    """The message exceeds the configured maximum size."""


class UnknownSchemaVersion(ContractError):
    """The message declares a schema version this code does not read."""


class InvalidEvent(ContractError):
    """The message is JSON but does not satisfy the event's schema.

    ``errors`` holds one ``(field, value, message)`` triple per violation, so a dead-letter
    record can say exactly which field was wrong and what it held.
    """

    def __init__(self, model: str, errors: list[tuple[str, object, str]]) -> None:
        self.model = model
        self.errors = errors
        detail = "; ".join(f"{field}={value!r}: {msg}" for field, value, msg in errors)
        super().__init__(f"invalid {model}: {detail}")


class ProvisionError(ContractError):
    """The declared topics could not be created on the broker."""
