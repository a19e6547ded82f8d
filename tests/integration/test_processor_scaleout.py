"""The processor as three workers on the real local broker (issue 17): every worker reads
its share of the telemetry and job partitions, one merges the whole cluster, and when that
one is killed another takes over with nothing lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpusched.contracts import JobEvent, JobRequest, encode
from gpusched.contracts.topics import JOBS
from gpusched.core import Params
from gpusched.processor.priorities import compute_priorities
from gpusched.processor.records import GpuReading, JobRecord, NodeRecord, fold_job
from tests.pipeline import Pipeline, free_port, metric_samples, produce, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

NODES = 200
WORKERS = [f"process-{i}" for i in range(3)]
MERGING = "the whole cluster's view"


def _submitted(i: int) -> JobEvent:
    return JobEvent(
        job_id=f"job-{i:03d}",
        type="submitted",
        tenant=f"team{i % 4}",
        priority_class="high" if i % 5 == 0 else "normal",
        request=JobRequest(num_gpu=[1, 2, 4, 8][i % 4]),
    )


def _running(i: int, node: int) -> JobEvent:
    gpus = tuple(range([1, 2, 4, 8][i % 4]))
    return JobEvent(
        job_id=f"job-{i:03d}", type="running", node_ids=(f"n{node:04d}",), gpu_indices=(gpus,)
    )


def _send(p: Pipeline, events: list[JobEvent]) -> None:
    produce(p.bootstrap, [(JOBS.name(p.prefix), e.job_id.encode(), encode(e)) for e in events])


def _merger(p: Pipeline) -> str:
    """The one live worker whose last word on the merge is that it merges."""
    said = {w: [line for line in p.log(w).splitlines() if MERGING in line] for w in WORKERS}
    merging = [w for w in p.alive() if said.get(w) and "no longer" not in said[w][-1]]
    assert len(merging) == 1, f"mergers: {merging}"
    return merging[0]


def _views(p: Pipeline, since: float = 0.0) -> dict[str, tuple[int, float]]:
    """The latest view of each node published after ``since``: (GPUs, GPUs allocated)."""
    rows = p.sql(
        "SELECT node_id, argMax(gpus_total, ts), argMax(gpus_allocated, ts) FROM node_views "
        f"WHERE ts > toDateTime64({since}, 3) GROUP BY node_id"
    )
    return {r[0]: (r[1], r[2]) for r in rows}


def _latest_priorities(p: Pipeline, since: float = 0.0) -> dict[str, str | None]:
    rows = p.sql(
        "SELECT job_id, argMax(tuple(pending_reason), ts).1 FROM priorities "
        f"WHERE ts > toDateTime64({since}, 3) GROUP BY job_id"
    )
    return {r[0]: r[1] for r in rows}


def test_three_workers_one_merger_and_failover(pipeline: Pipeline, tmp_path: Path) -> None:
    p = pipeline
    cluster = write_cluster(tmp_path / "c.cluster.csv", nodes=NODES, gpus_per_node=8)
    p.start_sink()
    ports = {worker: free_port() for worker in WORKERS}
    for i, worker in enumerate(WORKERS):
        p.start_as(
            worker,
            "process",
            GPUSCHED_HEALTH_PORT=str(ports[worker]),
            GPUSCHED_KAFKA_INSTANCE_ID=f"w{i}",
            GPUSCHED_PROCESSOR_DATA_DIR=str(tmp_path / worker),
            GPUSCHED_PROCESSOR_POLICY="fifo",  # scores that do not move with the clock
        )
    events = [_submitted(i) for i in range(40)]
    events += [_running(i, node=i) for i in range(10)]  # job i on node i
    _send(p, events)
    collector = p.start(
        "collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "90",
        "--speed", "2",
    )  # fmt: skip

    # One merged view: every node with all 8 GPUs, though each worker reads a third of
    # the telemetry partitions (samples are keyed by GPU, so a node's GPUs are spread).
    p.wait_for(
        "a view of every node with all its GPUs",
        lambda: len(v := _views(p)) == NODES and all(g == 8 for g, _ in v.values()),
    )
    p.wait_for("every job's priority", lambda: len(_latest_priorities(p)) == 40)
    assert set(WORKERS) <= set(p.alive()), f"a worker exited\n{p.tails()}"
    first = _merger(p)
    merging = {  # what an operator sees: one worker's gauge is 1
        w: metric_samples(f"http://127.0.0.1:{ports[w]}/metrics")[
            ("gpusched_processor_merging", ())
        ]
        for w in WORKERS
    }
    assert merging == {w: float(w == first) for w in WORKERS}
    # one publisher: no (epoch, job) twice
    assert (
        p.scalar(
            "SELECT count() FROM (SELECT epoch, job_id FROM priorities GROUP BY epoch, job_id "
            "HAVING count() > 1)"
        )
        == 0
    )

    # The priorities are those of the whole state: the same reasons compute_priorities
    # gives on every job and node (all GPUs fresh), not those of a worker's share.
    records: dict[str, JobRecord] = {}
    for event in events:
        folded = fold_job(records.get(event.job_id), event)
        assert folded is not None
        records[event.job_id] = folded
    now = time.time()
    nodes = [
        NodeRecord(
            node_id=f"n{n:04d}",
            gpu_model="V100",
            gpus={
                f"g{n}-{g}": GpuReading(gpu_index=g, ts=now, utilization_pct=0, power_w=0)
                for g in range(8)
            },
        )
        for n in range(NODES)
    ]
    expected = {
        u.job_id: u.pending_reason
        for u in compute_priorities(records.values(), nodes, Params(), "fifo", now, 1).updates
    }
    p.wait_for("the whole state's reasons", lambda: _latest_priorities(p) == expected, 30)
    allocated = {f"n{i:04d}": float([1, 2, 4, 8][i % 4]) for i in range(10)}
    p.wait_for(
        "views that count the running jobs' GPUs",
        lambda: all(_views(p)[n][1] == a for n, a in allocated.items()),
        30,
    )

    # SIGKILL the merger while telemetry streams, then change jobs while it is gone.
    p.kill(first)
    killed = time.time()
    later = [
        *(JobEvent(job_id=f"job-{i:03d}", type="finished") for i in range(4)),
        *(_running(i, node=i) for i in range(10, 14)),
        *(_submitted(i) for i in range(40, 48)),
    ]
    _send(p, later)
    p.wait_for("another worker merging", lambda: _merger(p) != first, 90)
    for event in later:
        folded = fold_job(records.get(event.job_id), event)
        assert folded is not None
        records[event.job_id] = folded
    live = {j for j, r in records.items() if r.state != "ended"}
    p.wait_for(
        "priorities of every live job from the new merger",
        lambda: live <= set(_latest_priorities(p, since=killed)),
        90,
    )
    latest = _latest_priorities(p, since=killed)
    assert all(latest[f"job-{i:03d}"] is None for i in range(4, 14)), "running"
    assert all(latest[f"job-{i:03d}"] for i in range(14, 48)), "pending, with a reason"
    # jobs 0-3 ended (their nodes free again), 10-13 started: no job update was lost
    allocated = {f"n{i:04d}": float([1, 2, 4, 8][i % 4]) if i >= 4 else 0.0 for i in range(14)}
    p.wait_for(
        "views after the takeover: all GPUs, the running jobs' allocations",
        lambda: (
            len(v := _views(p, since=killed)) == NODES
            and all(g == 8 for g, _ in v.values())
            and all(v[n][1] == a for n, a in allocated.items())
        ),
        60,
    )
    assert collector.wait(timeout=120) == 0
