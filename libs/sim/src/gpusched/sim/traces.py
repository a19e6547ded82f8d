"""Readers of the trace CSV format (``../shared/traces/README.md``), with row-level errors.

A malformed row (missing column, bad number, negative size) raises ``TraceError`` naming
the file and row. A well-formed job that no node of the cluster could ever hold is not
dropped silently: ``load_jobs`` returns it in ``skipped`` with the reason.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

from gpusched.core import Job, NodeSpec, Request
from gpusched.sim.errors import TraceError

__all__ = [
    "JOB_COLUMNS",
    "NODE_COLUMNS",
    "TraceJob",
    "load_cluster",
    "load_jobs",
    "trace_name",
    "traces_dir",
]

JOB_COLUMNS = (
    "job_id",
    "submit_time_s",
    "duration_s",
    "num_gpu",
    "gpu_type",
    "cpu_milli",
    "memory_mib",
    "tenant",
    "qos_or_priority",
)
NODE_COLUMNS = ("node_id", "gpu_type", "num_gpu", "cpu_milli", "memory_mib")
_UNLIMITED = 10**12  # a trace without CPU/memory figures does not constrain them


def traces_dir(default: Path | None = None) -> Path:
    """Where the trace files are: ``GPUSCHED_TRACES_DIR`` if set, else ``default``, else
    the first ``shared/traces`` beside the working directory or one of its parents (the
    development layout: ``../shared/traces`` next to the checkout)."""
    env = os.environ.get("GPUSCHED_TRACES_DIR")
    if env:
        return Path(env)
    if default is not None:
        return default
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if (folder / "shared" / "traces").is_dir():
            return folder / "shared" / "traces"
    return cwd.parent / "shared" / "traces"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. ``duration_s`` is for the simulator and the oracle only."""

    job_id: str
    submit_time: float
    duration_s: float
    request: Request
    tenant: str
    qos: str

    def job(self) -> Job:
        """The job as the scheduler sees it: everything but the duration."""
        return Job(self.job_id, self.request, self.submit_time, self.tenant, self.qos)


def trace_name(path: Path) -> str:
    return path.name.removesuffix(".csv").removesuffix(".jobs").removesuffix(".cluster")


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from exc
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        return [(i, row) for i, row in enumerate(reader, start=2)]


def _number(path: Path, line: int, row: dict[str, str], column: str, empty: float | None) -> float:
    text = (row.get(column) or "").strip()
    if not text:
        if empty is None:
            raise TraceError(f"{path}:{line}: column {column} is empty")
        return empty
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column}={text!r} is not a number") from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise TraceError(f"{path}:{line}: column {column}={text!r} must be a finite number >= 0")
    return value


def _unique_id(path: Path, line: int, row: dict[str, str], column: str, seen: set[str]) -> str:
    value = (row[column] or "").strip()
    if not value or value in seen:
        raise TraceError(f"{path}:{line}: {column} {value!r} is empty or repeated")
    seen.add(value)
    return value


def load_cluster(path: Path) -> list[NodeSpec]:
    """The nodes of a ``*.cluster.csv``."""
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for line, row in _rows(path, NODE_COLUMNS):
        node_id = _unique_id(path, line, row, "node_id", seen)
        gpus = _number(path, line, row, "num_gpu", 0)
        if gpus != int(gpus):
            raise TraceError(f"{path}:{line}: num_gpu={gpus} must be whole for a node")
        nodes.append(
            NodeSpec(
                node_id=node_id,
                gpu_model=(row["gpu_type"] or "").strip(),
                num_gpus=int(gpus),
                cpu_milli=int(_number(path, line, row, "cpu_milli", _UNLIMITED)),
                memory_mib=int(_number(path, line, row, "memory_mib", _UNLIMITED)),
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_jobs(path: Path, time_scale: float = 1.0) -> list[TraceJob]:
    """The jobs of a ``*.jobs.csv``, submit times divided by ``time_scale``."""
    if time_scale <= 0:
        raise TraceError(f"time scale must be > 0, got {time_scale}")
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    for line, row in _rows(path, JOB_COLUMNS):
        job_id = _unique_id(path, line, row, "job_id", seen)
        num_gpu = _number(path, line, row, "num_gpu", None)
        if num_gpu > 1 and num_gpu != int(num_gpu):
            raise TraceError(f"{path}:{line}: num_gpu={num_gpu} above 1 must be whole")
        models = frozenset(m for m in (row["gpu_type"] or "").split("|") if m.strip())
        jobs.append(
            TraceJob(
                job_id=job_id,
                submit_time=_number(path, line, row, "submit_time_s", None) / time_scale,
                duration_s=_number(path, line, row, "duration_s", None),
                request=Request(
                    num_gpu=num_gpu,
                    gpu_models=models,
                    cpu_milli=int(_number(path, line, row, "cpu_milli", 0)),
                    memory_mib=int(_number(path, line, row, "memory_mib", 0)),
                ),
                tenant=(row["tenant"] or "").strip() or "default",
                qos=(row["qos_or_priority"] or "").strip(),
            )
        )
    if not jobs:
        raise TraceError(f"{path}: no jobs")
    jobs.sort(key=lambda j: j.submit_time)
    return jobs
