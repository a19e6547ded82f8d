"""Simulated GPUs: samples for a cluster CSV, from what runs where and the power model;
nodes without GPUs read as a HostSample each (there, and how big).

A GPU a job holds reads busy (utilization, clocks, memory and the power model's busy draw
scaled by the job's share, with a little seeded noise); an idle GPU reads its idle draw.
The same seed, cluster and occupancy give the same samples.
"""

from __future__ import annotations

import random
from datetime import datetime

from gpusched.collector.host import host_sample
from gpusched.collector.occupancy import Occupancy
from gpusched.contracts import GpuTelemetrySample, HostSample
from gpusched.core import NodeSpec, PowerModel

__all__ = ["SimulatedSource"]

# Board memory and SM clocks by model (datasheets); an unknown model reads like a V100.
_MEMORY_MIB = {"T4": 15_360, "A10": 23_028, "A100": 81_920, "H100": 81_559, "H200": 143_771}
_MAX_SM_MHZ = {"T4": 1_590, "A10": 1_695, "A100": 1_410, "H100": 1_980, "H200": 1_980}
_IDLE_SM_MHZ = 210.0
_AMBIENT_C, _HOT_C = 30.0, 75.0
_UNNAMED_MODEL = "unknown"  # traces that do not name the GPU model (tiresias_16x4)


class SimulatedSource:
    """Reads every GPU of ``nodes``; who holds a GPU comes from ``occupancy``."""

    source = "simulated"

    def __init__(
        self,
        nodes: list[NodeSpec],
        occupancy: Occupancy,
        interval_s: float,
        power: PowerModel | None = None,
        seed: int = 0,
    ) -> None:
        self.nodes = [n for n in nodes if n.num_gpus > 0]
        self.hosts = [n for n in nodes if n.num_gpus == 0]  # CPU-only: a HostSample each
        self.occupancy = occupancy
        self.interval_s = interval_s
        self.power = power or PowerModel()
        self._rng = random.Random(seed)

    @property
    def gpu_count(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    @property
    def host_count(self) -> int:
        return len(self.hosts)

    def read(self, now: datetime) -> list[GpuTelemetrySample | HostSample]:
        """One sample per simulated GPU and one per node without GPUs, stamped ``now``."""
        samples: list[GpuTelemetrySample | HostSample] = [
            host_sample(host, self.interval_s, "simulated", now) for host in self.hosts
        ]
        noise = self._rng.random
        for node in self.nodes:
            watts = self.power.gpu(node.gpu_model)
            memory = float(_MEMORY_MIB.get(node.gpu_model, 16_384))
            max_mhz = float(_MAX_SM_MHZ.get(node.gpu_model, 1_530))
            for index in range(node.num_gpus):
                held = self.occupancy.holder(node.node_id, index)
                load = held[1] * (0.85 + 0.15 * noise()) if held else 0.0
                power_w = watts.idle_w + load * (watts.busy_w - watts.idle_w)
                samples.append(
                    GpuTelemetrySample(
                        ts=now,
                        gpu_uuid=f"SIM-{node.node_id}-{index}",
                        node_id=node.node_id,
                        gpu_index=index,
                        gpu_model=node.gpu_model or _UNNAMED_MODEL,
                        utilization_pct=round(100.0 * load, 1),
                        memory_used_mib=round(memory * load * 0.9, 0),
                        memory_total_mib=memory,
                        power_w=round(power_w, 1),
                        temperature_c=round(_AMBIENT_C + (_HOT_C - _AMBIENT_C) * load, 1),
                        sm_clock_mhz=max_mhz if held else _IDLE_SM_MHZ,
                        interval_s=self.interval_s,
                        job_id=held[0] if held else None,
                        source="simulated",
                    )
                )
        return samples
