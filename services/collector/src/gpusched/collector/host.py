"""A node without GPUs: this machine's CPUs and memory, one HostSample per round, so the
live view has the CPU-only nodes of a cluster too (run the collector there with
``GPUSCHED_COLLECTOR_SOURCE=host`` instead of ``nvml``)."""

from __future__ import annotations

import os
import socket
from datetime import datetime

from gpusched.contracts import HostSample

__all__ = ["HostSource"]


class HostSource:
    """Reads this machine as a node without GPUs."""

    source = "host"
    gpu_count, host_count = 0, 1

    def __init__(self, interval_s: float, node_id: str | None = None) -> None:
        self.node_id = node_id or socket.gethostname()
        self.interval_s = interval_s
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self.cpu_milli = (cpus or 1) * 1000
        self.memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20

    def read(self, now: datetime) -> list[HostSample]:
        """One reading of this node, stamped ``now``."""
        return [
            HostSample(
                ts=now,
                node_id=self.node_id,
                cpu_milli=self.cpu_milli,
                memory_mib=self.memory_mib,
                interval_s=self.interval_s,
                source="host",
            )
        ]
