"""The forecaster on the real local broker and the chDB engine: job events in, forecasts
out, stored by the sink; and job history read back from the store at start-up."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import AIOKafkaConsumer

from gpusched.contracts import DemandForecast, JobEvent, JobRequest, decode, encode
from gpusched.contracts.provision import ensure_topics
from gpusched.contracts.topics import FORECASTS, JOBS
from tests.pipeline import Pipeline, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

HOUR = timedelta(hours=1)


def _history(now: datetime) -> list[JobEvent]:
    """Three days of jobs from team-a (4 GPUs each, every hour, 1 h long, 8 by day and 2 by
    night) and the last six hours of jobs from team-b: too little history for Prophet."""
    events: list[JobEvent] = []
    start = now - 72 * HOUR
    for h in range(72):
        at = start + h * HOUR
        per_hour = 8 if at.hour in range(8, 20) else 2
        for k in range(per_hour):
            events += _job(f"a-{h}-{k}", "team-a", "normal", at + k * timedelta(minutes=5))
    for h in range(66, 72):
        events += _job(f"b-{h}", "team-b", "high", start + h * HOUR)
    return [e for e in events if e.ts <= now]  # the last hour's jobs still run


def _job(job_id: str, tenant: str, cls: str, at: datetime) -> list[JobEvent]:
    request = JobRequest(num_gpu=4, gpu_models=("V100",))
    return [
        JobEvent(
            job_id=job_id,
            type="submitted",
            ts=at,
            tenant=tenant,
            priority_class=cls,
            request=request,
        ),
        JobEvent(job_id=job_id, type="finished", ts=at + HOUR, tenant=tenant, priority_class=cls),
    ]


def _send(p: Pipeline, prefix: str, events: list[JobEvent]) -> None:
    produce(p.bootstrap, [(JOBS.name(prefix), e.job_id.encode(), encode(e)) for e in events])


def test_forecasts_from_the_jobs_topic_are_stored(pipeline: Pipeline) -> None:
    p = pipeline
    now = datetime.now(UTC)
    events = _history(now)
    p.start_sink()
    _send(p, p.prefix, events)

    out = p.run("forecast", "serve", "--rounds", "1", timeout=300)
    assert "forecasts published" in out

    expected = {
        f"{metric}/{scope}"
        for metric in ("gpu_demand", "arrivals")
        for scope in (
            "all",
            "model=V100",
            "tenant=team-a",
            "tenant=team-b",
            "class=normal",
            "class=high",
        )
    }

    def stored() -> dict[str, tuple]:
        rows = p.sql(
            "SELECT series, any(model), any(note), count(), min(lower <= yhat AND yhat <= upper)"
            " FROM forecasts FINAL GROUP BY series ORDER BY series"
        )
        by_series = {r[0]: tuple(r[1:]) for r in rows}
        # the sink stores the series in more than one batch: wait for them all
        return by_series if len(by_series) >= len(expected) else {}

    by_series = p.wait_for("every forecast series in ClickHouse", stored, timeout=60)
    assert set(by_series) == expected
    # demand series: the forecaster's model (survival + last-value) from the jobs of the
    # scope; arrival series: seasonal quantiles
    model, note, points, ordered = by_series["gpu_demand/tenant=team-a"]
    assert (model, note, points, ordered) == ("forecaster", None, 36, 1)  # 6 h of 10 min
    assert by_series["arrivals/tenant=team-a"][0] == "seasonal_quantile"
    # team-b is seen only in the last six hours: the same series start (zeros before it
    # was first seen) gives it three days too, so it gets the same model ...
    assert by_series["arrivals/tenant=team-b"][0] == "seasonal_quantile"
    # ... and the forecast reaches 6 h past the last closed step, from now.
    first, last = p.sql(
        "SELECT min(target_ts), max(target_ts) FROM forecasts FINAL WHERE series = 'gpu_demand/all'"
    )[0]
    assert datetime.fromisoformat(str(first)).replace(tzinfo=UTC) <= now + timedelta(minutes=10)
    span = datetime.fromisoformat(str(last)) - datetime.fromisoformat(str(first))
    assert span == timedelta(minutes=350)
    assert (
        p.scalar("SELECT max(yhat) FROM forecasts FINAL WHERE series = 'gpu_demand/tenant=team-a'")
        > 0
    )
    # gpusched forecast show: the latest forecast of a series, 6 h of it, as JSON and as a
    # table within 80 columns
    shown = json.loads(p.run("forecast", "show", "gpu_demand/all", "--json"))
    assert (shown["model"], len(shown["points"])) == ("forecaster", 36)
    assert all(pt["lower"] <= pt["yhat"] <= pt["upper"] for pt in shown["points"])
    table = p.run("forecast", "show", "gpu_demand/all", "--hours", "1", COLUMNS="80")
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == 6
    assert all(len(line) <= 80 and line.endswith("│") for line in rows)


def test_history_from_the_store_and_the_fallback(pipeline: Pipeline, topic_prefix: str) -> None:
    """A forecaster whose jobs topic is empty still forecasts from the store's history
    (36 h of it: a whole day, what the arrivals model needs)."""
    p = pipeline
    now = datetime.now(UTC)
    recent = [e for e in _history(now) if e.ts >= now - 36 * HOUR]
    p.start_sink()
    _send(p, p.prefix, recent)
    p.wait_for(
        "the job events in ClickHouse",
        lambda: p.scalar("SELECT count() FROM job_events") >= len(recent),
    )

    other = f"{topic_prefix}empty."  # same store, a jobs topic with nothing in it
    ensure_topics(p.bootstrap, other)
    p.run("forecast", "serve", "--rounds", "1", timeout=300, GPUSCHED_TOPIC_PREFIX=other)
    forecasts = asyncio.run(_read_forecasts(p.bootstrap, FORECASTS.name(other)))
    arrivals = forecasts["arrivals/all"]
    assert (arrivals.model, arrivals.note) == ("seasonal_quantile", None)
    demand = forecasts["gpu_demand/all"]
    assert demand.model == "forecaster"
    assert len(demand.points) == 36
    assert json.loads(demand.model_dump_json())["metric"] == "gpu_demand"


async def _read_forecasts(bootstrap: str, topic: str) -> dict[str, DemandForecast]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=10_000)
        return {
            f.series: f
            for records in batches.values()
            for f in (decode(DemandForecast, r.value or b"") for r in records)
        }
    finally:
        await consumer.stop()
