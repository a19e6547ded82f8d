"""A node without GPUs: this machine's CPUs and memory, one HostSample per round, so the
live view has the CPU-only nodes of a cluster too (run the collector there with
``GPUSCHED_COLLECTOR_SOURCE=host`` instead of ``nvml``)."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Literal

from gpusched.contracts import HostSample
from gpusched.core import NodeSpec

__all__ = ["HostSource", "host_sample"]


def host_sample(
    node: NodeSpec, interval_s: float, source: Literal["host", "simulated"], now: datetime
) -> HostSample:
    """The reading of ``node``, a node without GPUs, stamped ``now``."""
    return HostSample(
        ts=now,
        node_id=node.node_id,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        interval_s=interval_s,
        source=source,
    )


class HostSource:
    """Reads this machine as a node without GPUs."""

    source = "host"
    gpu_count, host_count = 0, 1

    def __init__(self, interval_s: float, node_id: str | None = None) -> None:
        self.interval_s = interval_s
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        self.node = NodeSpec(node_id or socket.gethostname(), "", 0, (cpus or 1) * 1000, memory_mib)

    def read(self, now: datetime) -> list[HostSample]:
        """One reading of this node, stamped ``now``."""
        return [host_sample(self.node, self.interval_s, "host", now)]
