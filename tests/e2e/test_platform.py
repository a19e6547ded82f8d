"""`make run`'s stack end to end: jobs submitted through the REST API are placed once,
finish, and are in ClickHouse; a dispatcher killed mid-run loses and doubles nothing."""

from __future__ import annotations

import json
import os
import signal

import httpx
import pytest

from gpusched.contracts import JobEvent, JobRequest, encode
from gpusched.contracts.topics import JOBS as JOBS_TOPIC
from tests.e2e.conftest import Platform
from tests.pipeline import produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

JOBS = 200


def _submit(platform: Platform, prefix: str, count: int) -> list[str]:
    ids = []
    with platform.client() as client:
        for i in range(count):
            body = {
                "gpus": [1, 2, 4, 8, 0.5][i % 5],
                "tenant": f"team{i % 3}",
                "priority_class": "high" if i % 7 == 0 else "normal",
                "job_id": f"{prefix}-{i:03d}",
            }
            response = client.post("/jobs", json=body)
            assert response.status_code == 201, response.text
            ids.append(response.json()["job_id"])
    return ids


def _lifecycle(platform: Platform, prefix: str) -> dict[str, dict[str, int]]:
    rows = platform.pipeline.sql(
        "SELECT job_id, type, count() FROM job_events FINAL "
        f"WHERE job_id LIKE '{prefix}-%' GROUP BY job_id, type"
    )
    steps: dict[str, dict[str, int]] = {}
    for job_id, kind, n in rows:
        steps.setdefault(job_id, {})[kind] = n
    return steps


def _all_finished(platform: Platform, prefix: str, ids: list[str]) -> dict[str, dict[str, int]]:
    p = platform.pipeline
    p.wait_for(
        f"{len(ids)} jobs finished in ClickHouse",
        lambda: (
            p.scalar(
                "SELECT uniqExact(job_id) FROM job_events "
                f"WHERE job_id LIKE '{prefix}-%' AND type = 'finished'"
            )
            == len(ids)
        ),
        timeout=240,
    )
    steps = _lifecycle(platform, prefix)
    assert set(steps) == set(ids)
    for job_id, kinds in steps.items():
        assert kinds["submitted"] == 1, job_id
        assert kinds["finished"] == 1, job_id
        # Placed once, or once more after each preemption: never twice at a time.
        assert kinds["placed"] == 1 + kinds.get("preempted", 0), (job_id, kinds)
    return steps


def test_two_hundred_jobs_through_the_api(platform: Platform) -> None:
    p = platform.pipeline
    ids = _submit(platform, "e2e", JOBS)
    anonymous = httpx.post(f"{platform.api}/jobs", json={"gpus": 1})
    assert anonymous.status_code == 401  # the platform starts with access control on
    assert "Bearer" in anonymous.json()["detail"]
    with platform.client() as client:
        for body, field in (
            ({"gpus": -1}, "gpus"),
            ({"gpus": 1.5}, "gpus"),
            ({"gpus": 16}, "gpus"),  # no node holds a 16-GPU gang
            ({"gpus": 1, "gpu_model": "H100"}, "gpu_model"),
            ({"gpus": 1, "priority_class": "vip"}, "priority_class"),
            ({"gpus": 1, "job_id": "bad id!"}, "job_id"),
        ):
            response = client.post("/jobs", json=body)
            assert response.status_code == 422, (body, response.text)
            assert response.json()["detail"][0]["loc"][-1] == field, response.text
        assert "/jobs" in client.get("/openapi.json").json()["paths"]

    steps = _all_finished(platform, "e2e", ids)
    decisions = p.sql(
        "SELECT job_id, count() FROM placements FINAL "
        "WHERE action = 'place' AND job_id LIKE 'e2e-%' GROUP BY job_id"
    )
    placed_by_decision = {job_id: n for job_id, n in decisions}
    for job_id, kinds in steps.items():
        assert placed_by_decision[job_id] == kinds["placed"], job_id  # none refused
    with platform.client() as client:
        status = client.get(f"/jobs/{ids[0]}").json()
        assert status["state"] == "finished"
        assert status["priority"] is None or status["priority"]["pending_reason"] is None
        assert client.get("/jobs/no-such-job").status_code == 404

    # who submitted is recorded (the session's admin token) ...
    (actor,) = p.sql(
        "SELECT DISTINCT actor FROM job_events FINAL "
        "WHERE job_id LIKE 'e2e-%' AND type = 'submitted'"
    )
    assert actor[0]
    # ... and both services that read parameters apply a change and say so
    with platform.client() as client:
        revision = client.get("/params").json()["revision"]
        body = {"changes": {"dynamic_qos_factor": 25}, "reason": "e2e", "revision": revision}
        assert client.patch("/params", json=body).status_code == 200
        p.wait_for(
            "the processor and the dispatcher to apply the change",
            lambda: {"processor", "dispatcher"} <= set(client.get("/params").json()["applied_at"]),
            timeout=60,
        )


def test_dispatcher_sigkill_mid_run(platform: Platform) -> None:
    p = platform.pipeline
    early = _submit(platform, "early", JOBS // 2)
    p.wait_for(
        "some jobs placed",
        lambda: (
            p.scalar(
                "SELECT count() FROM job_events WHERE type = 'placed' AND job_id LIKE 'early-%'"
            )
            >= 20
        ),
    )
    os.kill(platform.pid("dispatch"), signal.SIGKILL)
    late = _submit(platform, "late", JOBS // 2)  # while no dispatcher runs
    _all_finished(platform, "early", early)
    _all_finished(platform, "late", late)
    epochs = p.sql("SELECT DISTINCT epoch FROM placements ORDER BY epoch")
    assert [e for (e,) in epochs][:2] == [0, 1]  # the restarted dispatcher is epoch 1


def test_queue_nodes_and_cancel_from_the_command_line(platform: Platform) -> None:
    """What a Slurm user runs as squeue / sinfo / scancel, against `make run`'s stack."""
    p = platform.pipeline
    # A job for a GPU model no node has, sent to the jobs topic directly (the API would
    # refuse it): it waits for ever, and says why.
    stuck = JobEvent(
        job_id="cli-h100", type="submitted", tenant="team9", priority_class="high",
        request=JobRequest(num_gpu=2, gpu_models=("H100",)),
    )  # fmt: skip
    produce(p.bootstrap, [(JOBS_TOPIC.name(p.prefix), b"cli-h100", encode(stuck))])

    def listed() -> list[dict[str, object]]:
        rows: list[dict[str, object]] = json.loads(p.run("queue", "--tenant", "team9", "--json"))
        return rows

    rows = p.wait_for(
        "the stuck job with its reason", lambda: [r for r in listed() if r["pending_reason"]]
    )
    (row,) = rows
    assert (row["job_id"], row["state"], row["priority_class"], row["gpus"]) == (
        "cli-h100", "pending", "high", 2.0,
    )  # fmt: skip
    assert "H100" in str(row["pending_reason"])
    assert row["estimated_start"] is None  # it never starts: the core gives no estimate
    table = p.run("queue", "--state", "pending", COLUMNS="80")
    assert "cli-h100" in table

    nodes = json.loads(p.run("nodes", "--json"))
    assert len(nodes) == 16
    assert {(n["gpu_model"], n["gpus_total"], n["power_state"]) for n in nodes} <= {
        ("V100", 8, "on"), ("V100", 8, "parked"), ("V100", 8, "waking"),
    }  # fmt: skip
    assert "16 node(s)" in p.run("nodes", COLUMNS="80")

    cancel = ("cancel", "cli-h100", "--api", platform.api)
    assert "401" in p.run_failing(*cancel)  # no token
    assert "cli-h100: cancel requested" in p.run(*cancel, GPUSCHED_TOKEN=platform.token)
    p.wait_for("the cancelled job to leave the queue", lambda: listed() == [])
