"""gpusched.collector: GPU telemetry from NVML or a simulated cluster, onto Kafka."""

from gpusched.collector.app import CollectorStats, build_source, run_collector
from gpusched.collector.errors import CollectorError, NoGpuSource
from gpusched.collector.nvml import NvmlSource
from gpusched.collector.occupancy import Occupancy
from gpusched.collector.publisher import TelemetryPublisher
from gpusched.collector.settings import CollectorSettings
from gpusched.collector.simulated import SimulatedSource

__all__ = [
    "CollectorError",
    "CollectorSettings",
    "CollectorStats",
    "NoGpuSource",
    "NvmlSource",
    "Occupancy",
    "SimulatedSource",
    "TelemetryPublisher",
    "build_source",
    "run_collector",
]
