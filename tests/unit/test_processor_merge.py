"""The merger's fold of the merge topic (issue 17), without a broker: what a worker that
takes over rebuilds from the compacted topic's records, read in order. While it loads it
sends nothing, so the producer here is never used (``_Unused`` says so if it were)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from gpusched.contracts import ControlParameter, JobEvent, JobRequest
from gpusched.processor import ProcessorSettings
from gpusched.processor.deltas import MERGED_BY
from gpusched.processor.merger import Merger
from gpusched.processor.records import Delta, GpuReading, NodeRecord, fold_job

T = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class _Unused:
    topic = "merge"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a loading merger sent something ({name})")


def _record(delta: Delta | None, key: bytes | None = None) -> Any:
    value = delta.model_dump_json().encode() if delta is not None else None
    return SimpleNamespace(key=key or (delta.key() if delta else b""), value=value, headers=())


def _event(job: str, kind: str, at: float, **extra: Any) -> JobEvent:
    return JobEvent(job_id=job, type=kind, ts=T + timedelta(seconds=at), tenant="t", **extra)


def _part(node: str, gpus: dict[str, float], tag: str) -> Delta:
    readings = {
        uuid: GpuReading(gpu_index=i, ts=ts, utilization_pct=1.0, power_w=10.0)
        for i, (uuid, ts) in enumerate(gpus.items())
    }
    return Delta(node=NodeRecord(node_id=node, gpu_model="V100", gpus=readings), part=tag)


def _load(records: list[Any], **settings: Any) -> Merger:
    merger = Merger(ProcessorSettings(**settings), "app", _Unused())  # type: ignore[arg-type]
    asyncio.run(merger._fold(records))
    return merger


def test_a_node_is_the_union_of_its_parts_newest_reading_first() -> None:
    merger = _load(
        [
            _record(_part("n0", {"g0": 5.0, "g1": 5.0}, "t0")),
            _record(_part("n0", {"g2": 6.0}, "t3")),
            _record(_part("n0", {"g0": 4.0}, "t0")),  # older than what is there
            _record(_part("n0", {"g1": 9.0}, "t0")),
        ]
    )
    node = merger.view.nodes["n0"]
    assert {u: g.ts for u, g in node.gpus.items()} == {"g0": 5.0, "g1": 9.0, "g2": 6.0}


def test_an_earlier_node_part_is_read_and_an_unreadable_delta_skipped() -> None:
    """After an upgrade the compacted topic still holds node parts in the form the
    earlier version wrote (each GPU's reading an object, not an array): they are read.
    A delta that is not readable at all is skipped, and the rest folded."""
    old_form = SimpleNamespace(
        key=b"node:n1:t0",
        value=b'{"node": {"node_id": "n1", "gpu_model": "V100", "gpus": {"g9": {"gpu_index": 0,'
        b' "ts": 1.0, "utilization_pct": 1.0, "power_w": 1.0}}}, "part": "t0"}',
        headers=(),
    )
    garbled = SimpleNamespace(key=b"node:n2:t0", value=b'{"node": {"node_id": 7}}', headers=())
    merger = _load([old_form, garbled, _record(_part("n0", {"g0": 5.0}, "t0"))])
    assert set(merger.view.nodes) == {"n0", "n1"}
    assert merger.view.nodes["n1"].gpus["g9"] == GpuReading(0, 1.0, 1.0, 1.0)


def test_job_events_fold_once_and_records_never_go_back() -> None:
    submitted = _event("j", "submitted", 0, request=JobRequest(num_gpu=2))
    running = _event("j", "running", 10, node_ids=("n0",), gpu_indices=((0, 1),))
    preempted = _event("j", "preempted", 20)
    expected = fold_job(fold_job(fold_job(None, submitted), running), preempted)
    assert expected is not None
    older = fold_job(None, submitted)
    merger = _load(
        [
            _record(Delta(event=submitted)),
            _record(Delta(event=running)),
            _record(Delta(event=preempted)),
            _record(Delta(event=preempted)),  # a worker crashed before its commit: sent again
            _record(Delta(job=older)),  # the merger's own, older record, read back late
        ]
    )
    assert merger.records["j"] == expected
    assert merger.records["j"].preemptions == 1


def test_tombstones_forget_and_parameters_and_epochs_carry_over() -> None:
    gone = fold_job(None, _event("gone", "submitted", 0, request=JobRequest(num_gpu=1)))
    merger = _load(
        [
            _record(Delta(job=gone)),
            _record(None, key=b"job:gone"),
            _record(Delta(parameter=ControlParameter(name="dynamic_preempt_margin", value=1.5))),
            _record(Delta(epoch=41)),
            _record(Delta(epoch=7)),
        ]
    )
    assert "gone" not in merger.records
    assert merger.params.dynamic_preempt_margin == 1.5
    assert merger.epoch == 41


def test_ended_jobs_beyond_the_limit_are_forgotten() -> None:
    records = []
    for i in range(5):
        submitted = _event(f"j{i}", "submitted", i, request=JobRequest(num_gpu=1))
        finished = _event(f"j{i}", "finished", 100 + i)
        ended = fold_job(fold_job(None, submitted), finished)
        # the events, then the merger's record of the ended job, read back: counted once
        records += [_record(Delta(event=submitted)), _record(Delta(event=finished))]
        records.append(_record(Delta(job=ended)))
    merger = _load(records, processor_ended_jobs_per_tenant=2)
    assert sorted(merger.records) == ["j3", "j4"]
    assert merger.ended.add(merger.records["j4"]) == []  # noted once


def test_the_merger_folds_its_own_parts_once() -> None:
    """A worker that merges folds its own node parts in as it sends them, with its merge
    session in a header; read back from the topic they are skipped. A part of an earlier
    session (before a step-down) is folded like any other."""
    merger = _load([])
    merger.merged()
    session = merger.merge_own([_part("n0", {"g0": 5.0}, "t0").node])  # type: ignore[list-item]
    assert session is not None
    assert merger.view.nodes["n0"].gpus["g0"].ts == 5.0

    def sent(delta: Delta, by: bytes) -> Any:
        return SimpleNamespace(**{**vars(_record(delta)), "headers": [(MERGED_BY, by)]})

    asyncio.run(
        merger._fold(
            [
                sent(_part("n1", {"g1": 5.0}, "t0"), session),
                sent(_part("n2", {"g2": 5.0}, "t0"), b"old"),
            ]
        )
    )
    assert set(merger.view.nodes) == {"n0", "n2"}
    merger.step_down()
    assert merger.merge_own([_part("n3", {"g3": 5.0}, "t0").node]) is None  # type: ignore[list-item]


class _Recorder:
    """Keeps what a merging merger sends (views, checkpoints) instead of a producer."""

    topic = "merge"

    def __init__(self) -> None:
        self.deltas: list[Delta] = []
        self.views: list[bytes] = []

    async def send_all(self, deltas: Any, merged_by: bytes | None = None) -> None:
        self.deltas.extend(deltas)

    async def publish(self, topic: str, key: bytes, value: bytes) -> None:
        self.views.append(key)


def test_a_gpu_gone_silent_survives_its_partition_moving_and_a_new_merger() -> None:
    """Worker A read g0 and g1 of n0 on telemetry partition 0; g1 went silent; the
    partition moved to worker B, whose part (same key) has only g0, and compaction kept
    only B's. The merger had checkpointed n0 with both GPUs, so the next merger, rebuilt
    from the compacted topic, still lists g1 (stale) instead of losing it."""
    recorder = _Recorder()
    merger = Merger(ProcessorSettings(), "app", recorder)  # type: ignore[arg-type]
    asyncio.run(merger._fold([_record(_part("n0", {"g0": 5.0, "g1": 5.0}, "t0"))]))
    merger.merged()
    asyncio.run(merger.publish_readings())
    (checkpoint,) = recorder.deltas
    assert checkpoint.key() == b"node:n0:m"
    assert recorder.views == [b"n0"]
    asyncio.run(merger._fold([_record(_part("n0", {"g0": 9.0}, "t0"))]))  # B's part
    asyncio.run(merger.publish_readings())
    assert len(recorder.deltas) == 1  # no GPU appeared: no new checkpoint
    compacted = [_record(checkpoint), _record(_part("n0", {"g0": 9.0}, "t0"))]
    rebuilt = _load(compacted)
    assert {u: g.ts for u, g in rebuilt.view.nodes["n0"].gpus.items()} == {"g0": 9.0, "g1": 5.0}
    assert rebuilt.checkpointed == {"n0": {"g0", "g1"}}
