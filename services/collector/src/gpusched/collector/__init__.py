"""gpusched.collector — skeleton: its capability arrives with its own issue (see README)."""

from gpusched.collector.settings import CollectorSettings

__all__ = ["CollectorSettings"]
