"""The core's exceptions."""

from __future__ import annotations

__all__ = ["CoreError", "InvalidDecision", "InvalidParameter", "NeedsOracle", "UnknownName"]


class CoreError(Exception):
    """Base of every gpusched.core error."""


class UnknownName(CoreError, ValueError):
    """A policy, placement or parameter name that does not exist; lists the accepted ones.
    (A ValueError too, so a settings validator reports it as a bad value.)"""

    def __init__(self, kind: str, name: str, accepted: list[str]) -> None:
        self.kind, self.name, self.accepted = kind, name, accepted
        super().__init__(f"unknown {kind} {name!r}; accepted: {', '.join(sorted(accepted))}")


class InvalidDecision(CoreError):
    """A decision that cannot be applied to the cluster state (a bug or a stale snapshot)."""


class InvalidParameter(CoreError):
    """A parameter value of the wrong type or range."""


class NeedsOracle(CoreError, ValueError):
    """A policy that reads true run times (``srpt-oracle``) asked for without them: it runs
    in the simulator only, never on a live cluster."""
