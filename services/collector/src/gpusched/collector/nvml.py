"""Real GPUs through NVML (nvidia-ml-py, imported as ``pynvml``)."""

from __future__ import annotations

import importlib
import socket
from datetime import datetime
from types import ModuleType
from typing import Any

from gpusched.collector.errors import NoGpuSource
from gpusched.collector.occupancy import Occupancy
from gpusched.contracts import GpuTelemetrySample

__all__ = ["NvmlSource"]

_MIB = 1024 * 1024


class NvmlSource:
    """Reads every GPU NVML sees on this machine; the job on a GPU comes from ``occupancy``.

    ``nvml`` is the pynvml module; tests without a GPU pass a stand-in.
    """

    source = "nvml"
    host_count = 0  # a machine with GPUs is read by them

    def __init__(
        self,
        occupancy: Occupancy,
        interval_s: float,
        node_id: str | None = None,
        nvml: ModuleType | None = None,
    ) -> None:
        self.nvml: Any = nvml if nvml is not None else importlib.import_module("pynvml")
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NoGpuSource(
                f"NVML is not available on this machine ({exc}); on a node without GPUs set "
                "GPUSCHED_COLLECTOR_SOURCE=host; to simulate GPUs set "
                "GPUSCHED_COLLECTOR_SOURCE=simulated and GPUSCHED_COLLECTOR_CLUSTER=<cluster.csv>"
            ) from exc
        self.node_id = node_id or socket.gethostname()
        self.occupancy = occupancy
        self.interval_s = interval_s
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]
        if not self.handles:
            raise NoGpuSource(
                "NVML found no GPU on this machine; on a node without GPUs set "
                "GPUSCHED_COLLECTOR_SOURCE=host"
            )

    @property
    def gpu_count(self) -> int:
        return len(self.handles)

    def read(self, now: datetime) -> list[GpuTelemetrySample]:
        """One sample per GPU, stamped ``now``."""
        return [self._sample(index, handle, now) for index, handle in enumerate(self.handles)]

    def _sample(self, index: int, handle: Any, now: datetime) -> GpuTelemetrySample:
        nvml = self.nvml
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        ecc = self._optional(
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
            default=0,
        )
        mig = self._optional(nvml.nvmlDeviceGetMigMode, handle, default=(0, 0))
        held = self.occupancy.holder(self.node_id, index)
        return GpuTelemetrySample(
            ts=now,
            gpu_uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            node_id=self.node_id,
            gpu_index=index,
            gpu_model=_model(_text(nvml.nvmlDeviceGetName(handle))),
            utilization_pct=float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            memory_used_mib=memory.used / _MIB,
            memory_total_mib=memory.total / _MIB,
            power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            temperature_c=float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            sm_clock_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            ecc_uncorrected=int(ecc),
            mig_mode=bool(mig[0]),
            interval_s=self.interval_s,
            job_id=held[0] if held else None,
            source="nvml",
        )

    def _optional(self, call: Any, *args: Any, default: Any) -> Any:
        """A reading a board may not support (ECC, MIG): ``default`` when NVML says so."""
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return default

    def close(self) -> None:
        self.nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _model(name: str) -> str:
    """NVML's marketing name to the short model the power model and traces use
    ('NVIDIA H200' → 'H200', 'Tesla V100-SXM2-32GB' → 'V100')."""
    words = name.replace("NVIDIA", "").replace("Tesla", "").split()
    return words[0].split("-")[0] if words else name
