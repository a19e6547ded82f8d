"""The services' Prometheus metrics (prometheus-client), served on ``GET /metrics`` next to
``/healthz`` (``GPUSCHED_HEALTH_PORT``). One definition per metric, here, so that a
dashboard (infra/grafana/gpusched-metrics.json) and its test can name only metrics that
exist; each process exposes the ones its service moves (labels tell topics and tables).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "BATCH_EVENTS",
    "CONSUMED",
    "CONSUMER_LAG",
    "DEAD_LETTERED",
    "DISPATCH_CYCLE_SECONDS",
    "DISPATCH_DECISIONS",
    "FORECAST_FIT_SECONDS",
    "INSERT_ROWS",
    "INSERT_SECONDS",
    "MERGING",
    "METRICS",
    "PRODUCED",
    "VIEW_LAG_SECONDS",
]

CONSUMED = Counter(
    "gpusched_consumed_messages", "Messages consumed from a topic", ["topic"]
)  # exposed as gpusched_consumed_messages_total
PRODUCED = Counter("gpusched_produced_messages", "Messages produced to a topic", ["topic"])
DEAD_LETTERED = Counter(
    "gpusched_dead_lettered_messages", "Messages sent to a dead-letter topic", ["topic"]
)
CONSUMER_LAG = Gauge(
    "gpusched_consumer_lag_messages",
    "Messages on a topic not consumed yet by this process (high-water mark minus position)",
    ["topic"],
)
BATCH_EVENTS = Histogram(
    "gpusched_batch_events",
    "Events per batch a consumer handles (the sink's inserts, the processor's groups)",
    ["consumer"],
    buckets=(1, 10, 100, 1_000, 5_000, 10_000, 25_000, 50_000, 100_000),
)
INSERT_ROWS = Counter("gpusched_inserted_rows", "Rows inserted into a store table", ["table"])
INSERT_SECONDS = Histogram(
    "gpusched_insert_seconds",
    "Time to insert one batch into the store",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DISPATCH_CYCLE_SECONDS = Histogram(
    "gpusched_dispatch_cycle_seconds",
    "Time of one scheduling cycle of the dispatcher",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
DISPATCH_DECISIONS = Counter(
    "gpusched_dispatch_decisions",
    "Decisions the dispatcher made and handed to the backend (applied or refused)",
    ["kind"],
)
VIEW_LAG_SECONDS = Histogram(
    "gpusched_view_lag_seconds",
    "Time from a node's newest reading to the processor publishing its NodeView",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
MERGING = Gauge(
    "gpusched_processor_merging",
    "1 while this processor worker merges the whole cluster (one worker at a time)",
)
FORECAST_FIT_SECONDS = Histogram(
    "gpusched_forecast_fit_seconds",
    "Time to fit and publish one round of forecasts",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)

_ALL = (
    CONSUMED, PRODUCED, DEAD_LETTERED, CONSUMER_LAG, BATCH_EVENTS, INSERT_ROWS, INSERT_SECONDS,
    DISPATCH_CYCLE_SECONDS, DISPATCH_DECISIONS, VIEW_LAG_SECONDS, MERGING, FORECAST_FIT_SECONDS,
)  # fmt: skip
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}

# every metric's exposed sample names (counters gain _total, histograms _bucket/_sum/_count)
METRICS: frozenset[str] = frozenset(
    family.name + suffix
    for metric in _ALL
    for family in metric.describe()
    for suffix in _SUFFIXES[family.type]
)
