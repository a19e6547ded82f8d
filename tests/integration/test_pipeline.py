"""The streaming pipeline on the real local broker and the chDB engine: collector →
processor (Faust) → sink → ClickHouse, run as the same processes `gpusched` starts."""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gpusched.contracts import ControlParameter, JobEvent, JobRequest, encode
from gpusched.contracts.topics import CONTROL, JOBS, TELEMETRY
from gpusched.core import Params
from tests.builders import every_event
from tests.pipeline import Pipeline, produce, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _start(p: Pipeline, **env: str) -> None:
    p.start("sink", **env)
    p.start("process", **env)
    p.wait_for("the sink's SQL endpoint", lambda: p.scalar("SELECT 1") == 1, timeout=60)


def _jobs(count: int) -> list[JobEvent]:
    """Submitted jobs of several shapes; every seventh asks for a model no node has."""
    jobs = []
    for i in range(count):
        models = ("H100",) if i % 7 == 6 else ()
        jobs.append(
            JobEvent(
                job_id=f"job-{i:03d}",
                type="submitted",
                tenant=f"team{i % 3}",
                priority_class="high" if i % 5 == 0 else "normal",
                request=JobRequest(num_gpu=[1, 2, 4, 8, 0.5][i % 5], gpu_models=models),
            )
        )
    return jobs


def _send(p: Pipeline, events: list[JobEvent | ControlParameter], topic: str) -> None:
    key = "name" if topic == CONTROL.name(p.prefix) else "job_id"
    produce(p.bootstrap, [(topic, getattr(e, key).encode(), encode(e)) for e in events])


def test_end_to_end_1000_gpus_60s(pipeline: Pipeline, tmp_path: Path) -> None:
    p = pipeline
    cluster = write_cluster(tmp_path / "c.cluster.csv", nodes=125, gpus_per_node=8)
    _start(p, GPUSCHED_LOG_FORMAT="json")  # and their logs are JSON lines (checked below)
    jobs = _jobs(40)
    running = JobEvent(
        job_id=jobs[0].job_id, type="running", node_ids=("n0000",), gpu_indices=((0, 1, 2, 3),)
    )
    _send(p, [*jobs, running], JOBS.name(p.prefix))
    p.run(
        "collect",
        "--source",
        "simulated",
        "--cluster",
        str(cluster),
        "--rounds",
        "60",
        "--speed",
        "60",
    )

    p.wait_for("60,000 samples", lambda: p.scalar("SELECT count() FROM telemetry") >= 60_000)
    exact = p.sql("SELECT count(), uniqExact(event_id) FROM telemetry FINAL")[0]
    assert exact == [60_000, 60_000]
    assert p.scalar("SELECT uniqExact(gpu_uuid) FROM telemetry") == 1000

    pending = {j.job_id for j in jobs[1:]}
    p.wait_for(
        "a priority update for every pending job",
        lambda: pending <= {r[0] for r in p.sql("SELECT DISTINCT job_id FROM priorities")},
    )
    latest = {
        r[0]: r[1]
        for r in p.sql(
            "SELECT job_id, argMax(tuple(pending_reason), ts).1 FROM priorities GROUP BY job_id"
        )
    }
    assert all(latest[j] for j in pending), "every pending job has a reason"
    assert "H100" in latest[jobs[6].job_id]
    assert latest[jobs[0].job_id] is None

    def view_agrees() -> bool:
        views = p.sql(
            "SELECT node_id, argMax(gpus_total, ts), argMax(power_w, ts), "
            "argMax(gpus_allocated, ts) FROM node_views GROUP BY node_id ORDER BY node_id"
        )
        power = p.sql(
            "SELECT node_id, sum(p) FROM (SELECT node_id, gpu_uuid, argMax(power_w, ts) AS p "
            "FROM telemetry GROUP BY node_id, gpu_uuid) GROUP BY node_id ORDER BY node_id"
        )
        return (
            len(views) == 125
            and all(v[1] == 8 for v in views)
            and all(abs(v[2] - w[1]) < 0.5 for v, w in zip(views, power, strict=True))
            and views[0][3] == 4  # n0000: job-000 holds 4 GPUs
        )

    p.wait_for("node views that agree with the last samples", view_agrees)
    # The simulated collector follows what the backend reports: job-000 on n0000's GPUs 0-3.
    held = p.sql(
        "SELECT gpu_index, argMax(job_id, ts) FROM telemetry WHERE node_id = 'n0000' "
        "GROUP BY gpu_index ORDER BY gpu_index"
    )
    assert [r[1] for r in held] == ["job-000"] * 4 + [None] * 4
    assert "60000" in p.run("sql", "SELECT count() AS samples FROM gpusched.telemetry FINAL")
    assert p.alive() == ["sink", "process"]
    for service in ("sink", "process"):  # the processor's through Faust's own set-up
        records = [json.loads(line) for line in p.log(service).splitlines() if line.strip()]
        assert records, service
        assert all({"ts", "level", "logger", "message"} <= r.keys() for r in records)


def test_sigkill_of_processor_and_sink_loses_nothing(pipeline: Pipeline, tmp_path: Path) -> None:
    p = pipeline
    cluster = write_cluster(tmp_path / "c.cluster.csv", nodes=64, gpus_per_node=8)
    static = {"GPUSCHED_KAFKA_INSTANCE_ID": "w0"}  # static members: back in their place at once
    _start(p, **static)
    jobs = _jobs(30)
    _send(p, jobs, JOBS.name(p.prefix))
    collector = p.start(
        "collect",
        "--source",
        "simulated",
        "--cluster",
        str(cluster),
        "--rounds",
        "80",
        "--speed",
        "8",
    )
    p.wait_for("the first samples stored", lambda: p.scalar("SELECT count() FROM telemetry") > 0)
    p.wait_for(
        "priorities before the crash",
        lambda: p.scalar("SELECT uniqExact(job_id) FROM priorities") == len(jobs),
    )
    p.kill("process")
    p.kill("sink")
    restarted = time.time()
    _start(p, **static)
    assert collector.wait(timeout=120) == 0
    total = 80 * 512
    p.wait_for(
        "every sample after the restart",
        lambda: p.scalar("SELECT uniqExact(event_id) FROM telemetry") == total,
    )
    for table, expected in (("telemetry", total), ("job_events", len(jobs))):
        assert p.scalar(f"SELECT count() FROM {table} FINAL") == expected, table
    # The restarted worker rebuilt the job table from the merge topic: it publishes
    # priorities for jobs it has not been sent again.
    p.wait_for(
        "priorities of every job from the restarted worker",
        lambda: (
            p.scalar(
                f"SELECT uniqExact(job_id) FROM priorities WHERE ts > toDateTime64({restarted}, 3)"
            )
            == len(jobs)
        ),
    )
    p.wait_for(
        "a view of every node",
        lambda: p.scalar("SELECT uniqExact(node_id) FROM node_views") == 64,
    )


async def _read_dlq(bootstrap: str, topic: str, want: int) -> list[dict[str, object]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        found: list[dict[str, object]] = []
        deadline = time.monotonic() + 60
        while len(found) < want and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [json.loads(r.value) for r in records]
        return found
    finally:
        await consumer.stop()


def test_nodes_without_gpus_are_in_the_live_view(pipeline: Pipeline, tmp_path: Path) -> None:
    p = pipeline
    cluster = write_cluster(tmp_path / "c.cluster.csv", nodes=2, gpus_per_node=8)
    with cluster.open("a") as rows:  # two CPU-only nodes, as openb has
        rows.write("cpu0,,0,64000,262144\ncpu1,,0,32000,131072\n")
    _start(p)
    p.run("collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "3",
          "--speed", "30")  # fmt: skip
    # and this machine, as a real node without GPUs
    p.run("collect", "--source", "host", "--rounds", "1", GPUSCHED_COLLECTOR_NODE_ID="cpu2")
    p.wait_for(
        "a view of every node, GPU or not",
        lambda: p.scalar("SELECT uniqExact(node_id) FROM node_views") == 5,
        60,
    )
    views = p.sql(
        "SELECT node_id, argMax(gpu_model, ts), argMax(gpus_total, ts), argMax(healthy, ts) "
        "FROM node_views GROUP BY node_id ORDER BY node_id"
    )
    assert views[:3] == [[f"cpu{i}", "none", 0, True] for i in range(3)]
    assert [v[2] for v in views[3:]] == [8, 8]
    hosts = p.sql("SELECT node_id, count(), any(cpu_milli) FROM host_samples FINAL "
                  "GROUP BY node_id ORDER BY node_id")  # fmt: skip
    assert hosts[:2] == [["cpu0", 3, 64000], ["cpu1", 3, 32000]]
    assert hosts[2][:2] == ["cpu2", 1]
    assert p.scalar("SELECT count() FROM telemetry FINAL") == 3 * 16


def test_bad_input_goes_to_the_dlq_and_nothing_valid_is_lost(pipeline: Pipeline) -> None:
    p = pipeline
    _start(p)
    sample = json.loads(encode(every_event(datetime.now(UTC))[0]))
    bad = {
        "MalformedMessage": b"{not json",
        "InvalidEvent": json.dumps({**sample, "utilization_pct": "high"}).encode(),
        "UnknownSchemaVersion": json.dumps({**sample, "schema_version": 2}).encode(),
        "MessageTooLarge": json.dumps({**sample, "job_id": "x" * 1_000_100}).encode(),
    }
    valid = [
        json.dumps({**sample, "event_id": f"ok-{i}", "gpu_uuid": f"GPU-{i}"}).encode()
        for i in range(5)
    ]
    telemetry = TELEMETRY.name(p.prefix)
    messages = [(telemetry, b"k", v) for v in bad.values()]
    messages += [(telemetry, b"k", v) for v in valid]
    messages += [(JOBS.name(p.prefix), b"j", b'{"job_id": 3}')]
    unknown = ControlParameter(name="no_such_parameter", value=1.0)
    messages += [(CONTROL.name(p.prefix), b"no_such_parameter", encode(unknown))]
    produce(p.bootstrap, messages)
    _send(p, _jobs(3), JOBS.name(p.prefix))

    p.wait_for("the valid samples", lambda: p.scalar("SELECT count() FROM telemetry") == 5)
    p.wait_for("the valid jobs", lambda: p.scalar("SELECT count() FROM job_events") == 3)
    # The sink and the processor each reject what they cannot read (sink 4, processor 4).
    letters = asyncio.run(_read_dlq(p.bootstrap, TELEMETRY.dlq(p.prefix), 8))
    assert {str(x["error_type"]) for x in letters} == set(bad)
    assert all(x["error"] and x["value_b64"] for x in letters)
    jobs_dlq = asyncio.run(_read_dlq(p.bootstrap, JOBS.dlq(p.prefix), 2))
    assert {x["error_type"] for x in jobs_dlq} == {"InvalidEvent"}
    assert "job_id" in str(jobs_dlq[0]["error"])
    control_dlq = asyncio.run(_read_dlq(p.bootstrap, CONTROL.dlq(p.prefix), 1))
    assert "no_such_parameter" in str(control_dlq[0]["error"])
    assert p.alive() == ["sink", "process"]


def test_control_parameters_change_priorities(pipeline: Pipeline) -> None:
    p = pipeline
    _start(p)
    jobs = _jobs(5)
    _send(p, jobs, JOBS.name(p.prefix))
    high = jobs[0].job_id

    def latest_qos() -> float | None:
        """The high job's latest QoS term, once every job has had a priority."""
        if p.scalar("SELECT uniqExact(job_id) FROM priorities") < len(jobs):
            return None
        qos = p.scalar(
            f"SELECT argMax(components['qos'], epoch) FROM priorities WHERE job_id = '{high}'"
        )
        return round(qos, 6)

    # One class step above `normal`, once every job (so both classes) is in a computation:
    # the jobs reach the processor on three partitions, so the first may see `high` alone.
    default = round(-math.log(Params().dynamic_qos_factor), 6)
    p.wait_for("the default QoS term", lambda: latest_qos() == default)
    _send(p, [ControlParameter(name="dynamic_qos_factor", value=300.0)], CONTROL.name(p.prefix))
    p.wait_for("the new QoS term", lambda: latest_qos() == round(-math.log(300.0), 6))
