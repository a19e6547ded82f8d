"""The analyst query pack (gpusched.store's queries/) on data the pipeline produced."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpusched.contracts import JobEvent, JobRequest, encode
from gpusched.contracts.topics import JOBS
from gpusched.store import query_pack
from tests.pipeline import GPUSCHED, Pipeline, produce, write_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

QUERIES = query_pack()


def _rows(p: Pipeline, name: str) -> list[dict[str, Any]]:
    sql = QUERIES[name]
    answer = p.sql_answer(sql)
    return [dict(zip(answer["columns"], row, strict=True)) for row in answer["rows"]]


def test_query_pack(pipeline: Pipeline, tmp_path: Path) -> None:
    p = pipeline
    p.start("sink")
    p.wait_for("the sink", lambda: p.scalar("SELECT 1") == 1, timeout=60)
    submitted = [
        JobEvent(
            job_id=f"job-{i}",
            type="submitted",
            tenant=["vision", "speech"][i],
            priority_class=["high", "normal"][i],
            request=JobRequest(num_gpu=[4, 2][i]),
        )
        for i in range(2)
    ]
    time.sleep(0.2)  # a measurable wait between submission and start
    running = [
        JobEvent(job_id="job-0", type="running", node_ids=("n0000",), gpu_indices=((0, 1, 2, 3),)),
        JobEvent(job_id="job-1", type="placed", node_ids=("n0001",), gpu_indices=((0, 1),)),
    ]
    topic = JOBS.name(p.prefix)
    produce(p.bootstrap, [(topic, e.job_id.encode(), encode(e)) for e in [*submitted, *running]])
    # Cluster A: 4 V100 nodes, 5 samples a GPU, 1 s apart. Cluster B: 2 A100 nodes whose
    # samples run 120 s past A's, so that A's GPUs read as stale.
    a = write_cluster(tmp_path / "a.cluster.csv", nodes=4, gpus_per_node=8)
    b = write_cluster(tmp_path / "b.cluster.csv", nodes=2, gpus_per_node=8, model="A100", name="m")
    p.run("collect", "--source", "simulated", "--cluster", str(a), "--rounds", "5", "--speed", "50")
    p.run(
        "collect", "--source", "simulated", "--cluster", str(b), "--rounds", "3",
        "--interval", "60", "--speed", "1000",
    )  # fmt: skip
    p.wait_for("208 samples", lambda: p.scalar("SELECT count() FROM telemetry") == 208)
    p.wait_for("4 job events", lambda: p.scalar("SELECT count() FROM job_events") == 4)

    hourly = _rows(p, "gpu_utilization_by_model_hour")  # one or two hours (a boundary)
    util = {m: [r for r in hourly if r["gpu_model"] == m] for m in ("V100", "A100")}
    assert max(r["gpus"] for r in util["V100"]) == 32  # every round samples every GPU
    assert max(r["gpus"] for r in util["A100"]) == 16
    assert sum(r["gpu_hours"] for r in util["V100"]) == pytest.approx(160 / 3600, abs=2e-3)
    assert all(0 < r["avg_utilization_pct"] < 100 for r in util["V100"])

    jobs = {r["job_id"]: r for r in _rows(p, "energy_per_job")}
    assert set(jobs) == {"job-0", "job-1"}
    assert jobs["job-0"]["tenant"] == "vision"
    assert jobs["job-0"]["gpu_hours"] > 0
    assert jobs["job-0"]["energy_kwh"] > jobs["job-1"]["energy_kwh"] > 0  # 4 GPUs vs 2

    tenants = {r["tenant"]: r for r in _rows(p, "energy_per_tenant")}
    assert set(tenants) == {"vision", "speech"}
    assert tenants["vision"]["jobs"] == 1

    shares = _rows(p, "fair_share_by_tenant_hour")
    assert {r["tenant"] for r in shares} == {"vision", "speech"}
    for hour in {r["hour"] for r in shares}:  # one, or two if an hour began meanwhile
        in_hour = [r for r in shares if r["hour"] == hour]
        assert sum(r["used_share"] for r in in_hour) == pytest.approx(1.0, abs=0.01)
        assert all(r["fair_share"] == pytest.approx(1 / len(in_hour)) for r in in_hour)
    held = {t: sum(r["gpu_hours"] for r in shares if r["tenant"] == t) for t in tenants}
    assert held["vision"] / (held["vision"] + held["speech"]) == pytest.approx(4 / 6, abs=0.02)

    waits = {r["priority_class"]: r for r in _rows(p, "queue_wait_by_class")}
    assert set(waits) == {"high", "normal"}
    assert all(r["jobs_started"] == 1 and r["avg_wait_s"] >= 0 for r in waits.values())

    idle = {r["node_id"]: r for r in _rows(p, "idle_gpu_hours")}
    assert set(idle) == {"n0000", "n0001", "n0002", "n0003", "m0000", "m0001"}
    assert idle["n0000"]["idle_gpu_hours"] < idle["n0002"]["idle_gpu_hours"]  # 4 of 8 busy

    stale = _rows(p, "stale_gpus")
    assert {r["node_id"] for r in stale} == {"n0000", "n0001", "n0002", "n0003"}
    assert len(stale) == 32
    assert all(r["behind_s"] > 60 for r in stale)


def test_sql_endpoint_is_read_only(pipeline: Pipeline) -> None:
    p = pipeline
    p.start("sink")
    p.wait_for("the sink", lambda: p.scalar("SELECT 1") == 1, timeout=60)
    url = f"http://127.0.0.1:{p.sql_port}/sql"
    for statement in ("DROP TABLE telemetry", "INSERT INTO control_params (name) VALUES ('x')"):
        refused = httpx.post(url, content=statement.encode(), timeout=30)
        assert refused.status_code == 400, statement
        assert "readonly" in refused.text.lower(), statement
    assert p.scalar("SELECT count() FROM system.tables WHERE name = 'telemetry'") >= 1
    out = subprocess.run(
        [str(GPUSCHED), "sql", "SELEC nonsense"], env=p.env, capture_output=True, check=False
    )
    assert out.returncode == 1
    assert b"Syntax error" in out.stderr
