"""The collector's exceptions."""

from __future__ import annotations

__all__ = ["CollectorError", "NoGpuSource"]


class CollectorError(Exception):
    """Base of every gpusched.collector error."""


class NoGpuSource(CollectorError):
    """Neither NVML nor a simulated cluster is available to read GPUs from."""
