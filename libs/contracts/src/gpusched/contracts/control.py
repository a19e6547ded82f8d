"""The parameter revision a service works with, and the status records that say so.

Every service that reads the control topic (the processor, the dispatcher) reports on the
control status topic what it did with each parameter of a revision (applied, or rejected
with the error) and, every ``HEARTBEAT_S``, the revision in force: the API shows "applied
at" per revision from these, and the store keeps them for the audit trail.
"""

from __future__ import annotations

from typing import Final

from gpusched.contracts.events import ControlOutcome, ControlParameter, ControlStatus

__all__ = ["HEARTBEAT_S", "ControlRevision"]

HEARTBEAT_S: Final = 10.0


class ControlRevision:
    """The highest revision ``service`` has applied, and its status records."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.revision = 0

    def applied(self, parameter: ControlParameter) -> ControlStatus:
        self.revision = max(self.revision, parameter.revision)
        return self._status(parameter.revision, ControlOutcome.APPLIED, parameter.name)

    def rejected(self, parameter: ControlParameter, error: Exception) -> ControlStatus:
        return self._status(parameter.revision, ControlOutcome.REJECTED, parameter.name, error)

    def heartbeat(self) -> ControlStatus:
        return self._status(self.revision, ControlOutcome.IN_FORCE)

    def _status(
        self,
        revision: int,
        outcome: ControlOutcome,
        name: str | None = None,
        error: Exception | None = None,
    ) -> ControlStatus:
        return ControlStatus(
            service=self.service,
            revision=revision,
            outcome=outcome,
            name=name,
            error=None if error is None else str(error),
        )
