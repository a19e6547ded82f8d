"""The store package's exceptions."""

from __future__ import annotations

__all__ = ["MigrationError", "StoreError", "UnsupportedDsn"]


class StoreError(Exception):
    """Base of every gpusched.store error."""


class UnsupportedDsn(StoreError):
    """The DSN names a scheme the store cannot open."""


class MigrationError(StoreError):
    """A migration could not be applied, or an applied one was changed afterwards."""
