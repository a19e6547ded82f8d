"""The forecaster service: job events in, demand forecasts out.

On start it folds the job history the store holds (so series reach back beyond the
topic's retention), then the jobs topic from its first offset (repeats are harmless: the
series count each job once), and forecasts every series at once (demand series with the
forecaster model of ``gpusched.forecaster.survival``, arrival series with seasonal
quantiles); then again every ``forecaster_refit_s``. Each series' forecast is published to
the forecasts topic (keyed by series name), where the sink stores it and the dispatcher
reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

from gpusched.contracts import DemandForecast, ForecastPoint, JobEvent, JobEventType, encode
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.health import service_health
from gpusched.contracts.metrics import FORECAST_FIT_SECONDS, PRODUCED
from gpusched.contracts.producer import Producer
from gpusched.contracts.topics import FORECASTS, JOBS
from gpusched.forecaster.fitting import FitTask, fit_many
from gpusched.forecaster.models import Calibrator, Forecast, local_scale
from gpusched.forecaster.series import JobDemand, SeriesBuilder
from gpusched.forecaster.settings import ForecasterSettings
from gpusched.forecaster.survival import JobSpan, demand_forecast
from gpusched.store import StoreError, StoreSettings, read_query

__all__ = ["DemandFolder", "run_forecaster"]

log = logging.getLogger(__name__)

_HISTORY_SQL = """
SELECT job_id, type, toFloat64(toUnixTimestamp64Milli(ts)) / 1000 AS t, tenant,
       priority_class, num_gpu, gpu_models
FROM {db}.job_events FINAL
WHERE type IN ('submitted', 'finished', 'failed', 'cancelled')
ORDER BY ts
"""
_DEMAND = "gpu_demand/"
_CATCH_UP_S = 60.0
_RETRY_S = 30.0


class DemandFolder:
    """Job events (from the store, then the topic) into the forecaster's series."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.builder: SeriesBuilder | None = None
        self.events = 0

    def _fold(self, job_id: str, kind: JobEventType, t: float, demand: JobDemand | None) -> None:
        if self.builder is None:
            self.builder = SeriesBuilder(self.step_s, t)
        if kind is JobEventType.SUBMITTED and demand is not None:
            self.builder.submitted(job_id, demand, t)
        elif kind.ends:
            self.builder.ended(job_id, t)
        self.events += 1

    def apply(self, event: JobEvent) -> None:
        r = event.request
        demand = None
        if r is not None:
            demand = JobDemand.asking(r.num_gpu, r.gpu_models, event.tenant, event.priority_class)
        self._fold(event.job_id, event.type, event.ts.timestamp(), demand)

    def apply_row(self, row: list[Any]) -> None:
        job_id, kind, t, tenant, cls, gpus, models = row
        demand = None
        if gpus is not None:
            demand = JobDemand.asking(float(gpus), models, tenant, cls)
        self._fold(job_id, JobEventType(kind), float(t), demand)


def load_history(folder: DemandFolder, store: StoreSettings) -> int:
    """Fold the store's job events; 0 when the store has none or cannot be reached."""
    try:
        answer = read_query(_HISTORY_SQL.format(db=store.database), store)
    except StoreError as exc:
        log.warning("job history not read from the store (%s); starting from the topic", exc)
        return 0
    for row in answer.rows:
        folder.apply_row(row)
    return len(answer.rows)


def to_message(name: str, forecast: Forecast, width: float) -> DemandForecast:
    metric = name.split("/", 1)[0]
    points = tuple(
        ForecastPoint(
            ts=datetime.fromtimestamp(forecast.start + i * forecast.step_s, UTC),
            yhat=float(forecast.yhat[i]),
            lower=float(forecast.lower[i]),
            upper=float(forecast.upper[i]),
        )
        for i in range(len(forecast.yhat))
    )
    return DemandForecast(
        series=name,
        metric=metric,  # type: ignore[arg-type]  # the builder's metrics are the contract's
        model=forecast.model,
        step_s=int(forecast.step_s),
        interval_width=width,
        points=points,
        note=forecast.note,
    )


Snapshot = tuple[float, float, dict[str, Any], dict[str, list[JobSpan]]]
"""(origin, start of the forecasts, every series' closed steps, the jobs of each
gpu_demand series' scope)."""


class Refitter:
    """Forecasts every series the folder has, calibrates, and returns the messages:
    ``gpu_demand`` series with the forecaster's demand model (``demand_forecast``, from
    the jobs of its scope), ``arrivals`` series with ``arrivals_forecast`` (seasonal
    quantiles).

    ``snapshot`` runs on the event loop (the folder changes there); ``fit`` may run in a
    thread, on the snapshot only.
    """

    def __init__(self, settings: ForecasterSettings) -> None:
        self.settings = settings
        self.cfg = settings.models()
        self.horizon = max(round(settings.forecaster_horizon_s / self.cfg.step_s), 1)
        self._calibrators: dict[str, Calibrator] = {}

    def snapshot(self, builder: SeriesBuilder, now: float) -> Snapshot:
        builder.advance(now)
        builder.forget_ended_before(now - self.cfg.history_s)
        history = dict(builder.items())
        scopes = {name.split("/", 1)[1] for name in history if name.startswith(_DEMAND)}
        spans = builder.spans(scopes)
        return builder.origin, builder.closed_until, history, spans

    def fit(self, snapshot: Snapshot) -> list[DemandForecast]:
        origin, start, history, spans = snapshot
        tasks = {
            name: FitTask(values, start, self.horizon, "arrivals")
            for name, values in history.items()
            if not name.startswith(_DEMAND)
        }
        forecasts = fit_many(
            tasks,
            self.cfg,
            self.settings.forecaster_workers,
            self.settings.forecaster_fit_budget_s,
        )
        for name, values in history.items():
            if name.startswith(_DEMAND):
                jobs = spans[name.split("/", 1)[1]]
                forecasts[name] = demand_forecast(jobs, values, start, self.horizon, self.cfg)
        messages = []
        for name, forecast in sorted(forecasts.items()):
            calibrator = self._calibrators.setdefault(name, Calibrator(self.cfg.interval_width))
            calibrator.observe(history[name], origin, start)
            scale = local_scale(history[name], self.cfg.season_steps)
            calibrated = calibrator.calibrate(forecast, scale)
            messages.append(to_message(name, calibrated, self.cfg.interval_width))
        return messages


async def run_forecaster(
    settings: ForecasterSettings,
    store: StoreSettings | None = None,
    stop: asyncio.Event | None = None,
    rounds: int | None = None,
) -> int:
    """Forecast until ``stop`` is set (or ``rounds`` refits are done); forecasts published.
    Meanwhile the broker is watched and, with ``health_port``, ``GET /healthz`` served."""
    async with service_health(settings, "forecaster", log):
        return await _run_forecaster(settings, store, stop, rounds)


async def _run_forecaster(
    settings: ForecasterSettings,
    store: StoreSettings | None = None,
    stop: asyncio.Event | None = None,
    rounds: int | None = None,
) -> int:
    stop = stop or asyncio.Event()
    store = store or StoreSettings()
    prefix = settings.topic_prefix
    folder = DemandFolder(float(settings.forecaster_step_s))
    loaded = await asyncio.to_thread(load_history, folder, store)
    log.info("folded %d job events from the store", loaded)
    caught_up = asyncio.Event()
    follower = asyncio.create_task(
        follow_topic(settings, JOBS.name(prefix), JobEvent, folder.apply, caught_up)
    )
    producer = Producer(settings)
    refitter = Refitter(settings)
    published = 0
    done = 0
    try:
        await asyncio.wait_for(caught_up.wait(), _CATCH_UP_S)
        await producer.start()
        while not stop.is_set() and (rounds is None or done < rounds):
            if folder.builder is not None:
                started = time.monotonic()
                snapshot = refitter.snapshot(folder.builder, time.time())
                messages = await asyncio.to_thread(refitter.fit, snapshot)
                sent = [
                    await producer.send(
                        FORECASTS.name(prefix), encode(message), key=message.series.encode()
                    )
                    for message in messages
                ]
                await producer.delivered(sent)
                FORECAST_FIT_SECONDS.observe(time.monotonic() - started)
                PRODUCED.labels(topic=FORECASTS.base).inc(len(messages))
                published += len(messages)
                done += 1
                log.info(
                    "published %d forecasts (%d events folded) in %.1f s",
                    len(messages),
                    folder.events,
                    time.monotonic() - started,
                )
            else:
                log.info("no job events yet; nothing to forecast")
            if rounds is not None and done >= rounds:
                break
            # Until there is a first forecast (no events, or no whole step yet), look again
            # soon rather than after a full refit period.
            refit_s = settings.forecaster_refit_s
            wait_s = refit_s if published else min(_RETRY_S, refit_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_s)
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await producer.stop()
    return published
