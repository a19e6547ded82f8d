"""The power model: watts per GPU model and per node, and exact energy integration.

Figures and their sources are in ``power_model.json`` beside this module. Power is
piecewise constant between scheduling events, so energy is the exact sum of watts times
seconds over those pieces (``EnergyMeter``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpusched.core.cluster import NodeState
from gpusched.core.model import PowerState

__all__ = ["EnergyMeter", "GpuPower", "HostPower", "PowerModel", "PowerSplit"]


@dataclass(frozen=True, slots=True)
class GpuPower:
    idle_w: float
    busy_w: float


@dataclass(frozen=True, slots=True)
class HostPower:
    min_gpus: int
    host_idle_w: float
    host_busy_w: float
    parked_w: float


@dataclass(frozen=True, slots=True)
class PowerSplit:
    """A node's draw now, split into what serves jobs (floor) and the rest (idle)."""

    total_w: float
    floor_w: float  # allocated GPUs' share of busy power + the host of a node with jobs


class PowerModel:
    """Watts of a node in its current state, from the documented data file."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        if data is None:
            text = resources.files("gpusched.core").joinpath("power_model.json").read_text()
            data = json.loads(text)
        self.gpus = {m: GpuPower(**g) for m, g in data["gpus"].items()}
        self.hosts = sorted(
            (HostPower(**h) for h in data["nodes"]), key=lambda h: h.min_gpus, reverse=True
        )
        self.wake_latency_s = float(data["wake_latency_s"])

    def gpu(self, model: str) -> GpuPower:
        return self.gpus.get(model) or self.gpus[""]

    def host(self, num_gpus: int) -> HostPower:
        return next(h for h in self.hosts if num_gpus >= h.min_gpus)

    def node(self, node: NodeState) -> PowerSplit:
        """The node's draw given its power state and allocations."""
        host = self.host(node.spec.num_gpus)
        if node.power is PowerState.PARKED:
            return PowerSplit(host.parked_w, 0.0)
        gpu = self.gpu(node.spec.gpu_model)
        n = node.spec.num_gpus
        if node.power is PowerState.WAKING or not node.jobs:
            return PowerSplit(host.host_idle_w + n * gpu.idle_w, 0.0)
        used = sum(1.0 - f for f in node.gpu_free)
        busy_part = used * gpu.busy_w
        idle_part = (n - used) * gpu.idle_w
        return PowerSplit(host.host_busy_w + busy_part + idle_part, host.host_busy_w + busy_part)


class EnergyMeter:
    """Integrates piecewise-constant power exactly over a window [start, end]."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.total_j = 0.0
        self.floor_j = 0.0
        self._last_t: float | None = None
        self._total_w = 0.0
        self._floor_w = 0.0

    def advance(self, t: float) -> None:
        """Account for the power held from the last change up to ``t``."""
        if self._last_t is not None:
            lo, hi = max(self._last_t, self.start), min(t, self.end)
            if hi > lo:
                self.total_j += self._total_w * (hi - lo)
                self.floor_j += self._floor_w * (hi - lo)
        self._last_t = t

    def set_power(self, total_w: float, floor_w: float) -> None:
        """The cluster's draw from the last ``advance`` time on."""
        self._total_w, self._floor_w = total_w, floor_w

    @property
    def idle_j(self) -> float:
        return self.total_j - self.floor_j
