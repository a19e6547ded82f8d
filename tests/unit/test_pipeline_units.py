"""Pure parts of the pipeline: job folding, the live view, priorities, the collector's
sources and buffer, control-parameter conversion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from gpusched.collector import (
    CollectorSettings,
    NoGpuSource,
    NvmlSource,
    Occupancy,
    SimulatedSource,
    build_source,
)
from gpusched.collector.publisher import TelemetryPublisher
from gpusched.contracts import HostSample, JobEvent, JobRequest
from gpusched.core import InvalidParameter, NodeSpec, Params, UnknownName
from gpusched.processor import LiveView, compute_priorities, fold_job
from gpusched.processor.records import EndedJobs, JobRecord

T = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _event(job: str, kind: str, at: float, **extra: Any) -> JobEvent:
    return JobEvent(job_id=job, type=kind, ts=T + timedelta(seconds=at), **extra)


def _submitted(job: str, at: float, gpus: float = 1, cls: str = "normal") -> JobEvent:
    return _event(job, "submitted", at, priority_class=cls, request=JobRequest(num_gpu=gpus))


@pytest.mark.parametrize(
    ("events", "state", "executed_s", "preemptions"),
    [
        ([], "pending", 0.0, 0),
        ([("running", 10)], "running", 0.0, 0),
        ([("running", 10), ("preempted", 40)], "pending", 30.0, 1),
        ([("running", 10), ("preempted", 40), ("running", 50), ("finished", 70)], "ended", 50.0, 1),
        ([("finished", 70), ("running", 80)], "ended", 0.0, 0),  # nothing after the end
    ],
)
def test_fold_job(
    events: list[tuple[str, float]], state: str, executed_s: float, preemptions: int
) -> None:
    record = fold_job(None, _submitted("j", 0))
    for kind, at in events:
        extra = {"node_ids": ("n0",), "gpu_indices": ((0,),)} if kind == "running" else {}
        record = fold_job(record, _event("j", kind, at, **extra))
    assert record is not None
    assert (record.state, record.executed_s, record.preemptions) == (state, executed_s, preemptions)
    assert fold_job(None, _event("other", "running", 1)) is None  # never submitted
    assert fold_job(record, _submitted("j", 99)) == record  # a replayed submission


def test_ended_jobs_keep_the_newest_per_tenant() -> None:
    ended = EndedJobs(limit=2)

    def end(job: str, tenant: str, at: float) -> list[str]:
        record = fold_job(None, _submitted(job, 0).model_copy(update={"tenant": tenant}))
        record = fold_job(record, _event(job, "finished", at))
        assert record is not None
        return ended.add(record)

    assert end("a1", "a", 10) == []
    assert end("a2", "a", 30) == []
    assert end("b1", "b", 5) == []  # tenants are counted apart
    assert end("a0", "a", 20) == ["a1"]  # the oldest end goes first, whatever the order
    assert end("a3", "a", 40) == ["a0"]


def _records(*events: JobEvent) -> list[JobRecord]:
    """The job records folded from ``events``."""
    records: dict[str, JobRecord | None] = {}
    for event in events:
        records[event.job_id] = fold_job(records.get(event.job_id), event)
    return [r for r in records.values() if r]


def _samples(node: str, count: int, at: datetime, ecc: int = 0) -> list[Any]:
    occupancy = Occupancy()
    source = SimulatedSource([NodeSpec(node, "V100", count, 1, 1)], occupancy, 1.0)
    return [s.model_copy(update={"ecc_uncorrected": ecc}) for s in source.read(at)]


def test_live_view_marks_stale_and_broken_gpus() -> None:
    view = LiveView(stale_after_s=30)
    for sample in _samples("n0", 4, T):
        view.observe(sample)
    for sample in _samples("n0", 2, T + timedelta(seconds=60), ecc=1)[:1]:
        view.observe(sample)
    assert [n.node_id for n in view.take_dirty()] == ["n0"]
    assert view.take_dirty() == []
    now = (T + timedelta(seconds=61)).timestamp()
    node = view.node_view("n0", now, allocated=1.0)
    assert node.gpus_total == 4
    assert len(node.stale_gpus) == 3  # three GPUs last seen 61 s ago
    assert node.gpus_allocatable == 0.0  # the fresh one reports an ECC error
    assert not node.healthy
    assert view.newly_stale(now) == ["n0"]
    assert view.newly_stale(now) == []


def test_priorities_cover_every_job_with_core_components_and_reasons() -> None:
    view = LiveView(stale_after_s=30)
    for sample in _samples("n0", 4, T):
        view.observe(sample)
    records = _records(
        _submitted("big", 0, gpus=4),
        _event("big", "running", 5, node_ids=("n0",), gpu_indices=((0, 1, 2, 3),)),
        _submitted("high", 10, gpus=1, cls="high"),
        _submitted("low", 11, gpus=2),
    )
    now = (T + timedelta(seconds=100)).timestamp()
    result = compute_priorities(records, view.nodes.values(), Params(), "dynamic", now, 7)
    by_job = {u.job_id: u for u in result.updates}
    assert set(by_job) == {"big", "high", "low"}
    assert by_job["big"].pending_reason is None
    assert by_job["high"].pending_reason
    assert by_job["low"].pending_reason
    assert set(by_job["high"].components) == {"log_rank_gpu_s", "qos", "fair_share", "guard"}
    assert by_job["high"].score == pytest.approx(sum(by_job["high"].components.values()))
    assert by_job["high"].score < by_job["low"].score  # high class runs first
    assert all(u.epoch == 7 for u in result.updates)
    assert result.allocated == {"n0": 4.0}
    # every waiting job has an estimated start: the queue played forward
    assert by_job["high"].estimated_start is not None
    assert by_job["low"].estimated_start is not None


def test_cpu_only_jobs_run_on_nodes_the_gpu_view_does_not_know(
    caplog: pytest.LogCaptureFixture,
) -> None:
    view = LiveView(stale_after_s=30)
    for sample in _samples("n0", 4, T):
        view.observe(sample)
    records = _records(
        _submitted("cpu", 0, gpus=0),
        _event("cpu", "running", 5, node_ids=("cpu-node-1",), gpu_indices=((),)),
        _submitted("gpu", 1, gpus=2),
        _event("gpu", "running", 6, node_ids=("gone",), gpu_indices=((0, 1),)),
        _submitted("waits", 10, gpus=1),
    )
    now = (T + timedelta(seconds=100)).timestamp()
    with caplog.at_level("WARNING"):
        result = compute_priorities(records, view.nodes.values(), Params(), "dynamic", now, 1)
    # the CPU-only job runs on a GPU-less node of the snapshot, quietly; a GPU job on a
    # node the view has never seen is still a mismatch worth a line
    assert "job cpu" not in caplog.text
    assert "no room for it: job gpu: unknown node 'gone'" in caplog.text
    assert {u.job_id for u in result.updates} >= {"cpu", "waits"}
    assert result.allocated == {"n0": 0.0}  # no view is published for the GPU-less node


def test_simulated_source_follows_occupancy_and_power_model() -> None:
    occupancy = Occupancy()
    occupancy.apply(_submitted("j", 0, gpus=0.5))
    occupancy.apply(_event("j", "running", 1, node_ids=("n0",), gpu_indices=((1,),)))
    source = SimulatedSource([NodeSpec("n0", "V100", 2, 1, 1)], occupancy, 1.0, seed=3)
    idle, busy = source.read(T)
    assert (idle.job_id, idle.power_w, idle.utilization_pct) == (None, 40.0, 0.0)
    assert busy.job_id == "j"
    assert 40.0 < busy.power_w <= 40.0 + 0.5 * 210.0  # half a GPU of the V100's range
    occupancy.apply(_event("j", "finished", 2))
    assert all(s.job_id is None for s in source.read(T))
    again = SimulatedSource([NodeSpec("n0", "V100", 2, 1, 1)], Occupancy(), 1.0, seed=3)
    assert [s.power_w for s in again.read(T)] == [40.0, 40.0]


class _FakeNvml:
    """A stand-in for pynvml: this machine has no GPU or driver (a lent GPU machine runs
    the real library; see the issue note)."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_VOLATILE_ECC = NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: int, fail_init: bool = False) -> None:
        self.gpus, self.fail_init = gpus, fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=1024**3, total=141 * 1024**3)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=87)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 512_000

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 61

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return (1, 1)

    def nvmlShutdown(self) -> None:
        pass


def test_nvml_source_maps_readings() -> None:
    fake = _FakeNvml(2)
    occupancy = Occupancy()
    occupancy.apply(_submitted("j", 0))
    occupancy.apply(_event("j", "running", 1, node_ids=("gpu-host",), gpu_indices=((1,),)))
    source = NvmlSource(occupancy, 1.0, node_id="gpu-host", nvml=fake)  # type: ignore[arg-type]
    first, second = source.read(T)
    assert (first.gpu_uuid, first.gpu_model, first.power_w) == ("GPU-0", "H200", 512.0)
    assert (first.memory_used_mib, first.memory_total_mib) == (1024.0, 141 * 1024.0)
    assert (first.ecc_uncorrected, first.mig_mode, first.source) == (0, True, "nvml")
    assert (first.job_id, second.job_id) == (None, "j")


def test_no_nvml_says_what_to_do() -> None:
    with pytest.raises(NoGpuSource, match="GPUSCHED_COLLECTOR_SOURCE=simulated"):
        NvmlSource(Occupancy(), 1.0, nvml=_FakeNvml(0, fail_init=True))  # type: ignore[arg-type]


def test_publisher_buffer_drops_oldest_and_counts() -> None:
    publisher = TelemetryPublisher("127.0.0.1:1", "t", capacity=5)
    samples = _samples("n0", 8, T)
    publisher.offer(samples)
    assert len(publisher) == 5
    assert publisher.dropped == 3
    assert [s.gpu_index for s in publisher.buffer] == [3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("dynamic_qos_factor", 300, 300.0),
        ("dynamic_qos_factor", "12.5", 12.5),
        ("max_scan", 50.0, 50),
        ("dynamic_energy_aware", "false", False),
        ("qos_classes", "high, normal", ("high", "normal")),
        ("tiresias_thresholds_gpu_s", "3600, 57600", (3600.0, 57600.0)),  # numbers
        ("dynamic_reserve_after_s", "inf", float("inf")),  # its upper bound is inf
    ],
)
def test_params_with_setting(name: str, value: Any, expected: Any) -> None:
    assert getattr(Params().with_setting(name, value), name) == expected


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("nope", 1.0, UnknownName),
        ("dynamic_qos_factor", "fast", InvalidParameter),
        ("dynamic_qos_factor", -1.0, InvalidParameter),
        ("dynamic_energy_aware", "maybe", InvalidParameter),
    ],
)
def test_params_with_setting_refuses(name: str, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=name):
        Params().with_setting(name, value)


@pytest.mark.parametrize("name", Params.names())
def test_every_parameter_is_documented_and_its_default_within_its_bounds(name: str) -> None:
    spec = Params.specs()[name]
    assert spec.doc
    spec.check(spec.default)  # raises if the default were out of its own bounds
    if spec.lo is not None and spec.lo > -float("inf"):
        with pytest.raises(InvalidParameter, match=f"{name}: .* below its lower bound"):
            Params().with_setting(name, spec.lo - 1)
    if spec.hi is not None and spec.hi < float("inf"):
        with pytest.raises(InvalidParameter, match=f"{name}: .* above its upper bound"):
            Params().with_setting(name, spec.hi * 2 + 1)


def test_nodes_without_gpus_are_in_the_view_from_their_host_readings() -> None:
    nodes = [NodeSpec("g0", "V100", 2, 1000, 1000), NodeSpec("c0", "", 0, 64000, 256000)]
    source = SimulatedSource(nodes, Occupancy(), 1.0)
    samples = source.read(T)
    hosts = [s for s in samples if isinstance(s, HostSample)]
    assert [(h.node_id, h.cpu_milli, h.memory_mib) for h in hosts] == [("c0", 64000, 256000)]
    assert source.gpu_count == 2
    view = LiveView(stale_after_s=30)
    for sample in samples:
        if isinstance(sample, HostSample):
            view.observe_host(sample)
        else:
            view.observe(sample)
    assert [n.node_id for n in view.take_dirty()] == ["c0", "g0"]
    now = (T + timedelta(seconds=1)).timestamp()
    cpu = view.node_view("c0", now, allocated=0.0)
    assert (cpu.gpu_model, cpu.gpus_total, cpu.gpus_allocatable) == ("none", 0, 0)
    assert cpu.healthy
    assert cpu.last_seen == T
    later = (T + timedelta(seconds=45)).timestamp()  # no reading for 45 s: overdue
    assert set(view.newly_stale(later)) == {"c0", "g0"}
    assert not view.node_view("c0", later, allocated=0.0).healthy
    # a CPU job runs on it in the snapshot, at the size the host reported
    records = _records(
        _event("cpu", "submitted", 0, request=JobRequest(num_gpu=0, cpu_milli=8000)),
        _event("cpu", "running", 5, node_ids=("c0",), gpu_indices=((),)),
    )
    result = compute_priorities(records, view.nodes.values(), Params(), "dynamic", now, 1)
    assert [u.job_id for u in result.updates] == ["cpu"]
    assert result.allocated == {"g0": 0.0}


def test_a_node_without_gpus_reads_as_a_host_sample() -> None:
    settings = CollectorSettings(collector_source="host", collector_node_id="cpu-7")
    source, _ = build_source(settings, Occupancy())
    (sample,) = source.read(T)
    assert (sample.node_id, sample.source, sample.ts) == ("cpu-7", "host", T)
    assert sample.cpu_milli >= 1000
    assert sample.memory_mib > 0
    assert (source.gpu_count, source.host_count) == (0, 1)
