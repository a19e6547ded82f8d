"""The simulator's exceptions."""

from __future__ import annotations

__all__ = ["SimError", "TraceError"]


class SimError(Exception):
    """Base of every gpusched.sim error."""


class TraceError(SimError):
    """A trace file that cannot be read; the message names the file, row and column."""
