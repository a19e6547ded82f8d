-- One table per gpusched topic. ReplacingMergeTree keyed by event id so that a batch the
-- sink replays after a crash collapses onto the rows it already wrote (FINAL or merges).

CREATE TABLE IF NOT EXISTS telemetry
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    gpu_uuid        String,
    node_id         LowCardinality(String),
    gpu_index       UInt16,
    gpu_model       LowCardinality(String),
    utilization_pct Float32,
    memory_used_mib Float32,
    memory_total_mib Float32,
    power_w         Float32,
    temperature_c   Float32,
    sm_clock_mhz    Float32,
    ecc_uncorrected UInt32,
    mig_mode        Bool,
    interval_s      Float32,
    job_id          Nullable(String),
    source          LowCardinality(String)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (node_id, gpu_uuid, ts, event_id)
TTL toDateTime(ts) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS job_events
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    job_id          String,
    type            LowCardinality(String),
    tenant          LowCardinality(String),
    priority_class  LowCardinality(String),
    num_gpu         Nullable(Float32),
    gpu_models      Array(String),
    cpu_milli       Nullable(UInt32),
    memory_mib      Nullable(UInt64),
    node_ids        Array(String),
    gpu_indices     Array(Array(UInt16)),
    decision_id     Nullable(String),
    reason          Nullable(String)
)
ENGINE = ReplacingMergeTree
ORDER BY (job_id, ts, event_id);

CREATE TABLE IF NOT EXISTS placements
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    decision_id     String,
    epoch           UInt64,
    action          LowCardinality(String),
    job_id          Nullable(String),
    node_ids        Array(String),
    gpu_indices     Array(Array(UInt16)),
    gpu_share       Nullable(Float32),
    reason          String
)
ENGINE = ReplacingMergeTree
ORDER BY (decision_id, event_id);

CREATE TABLE IF NOT EXISTS priorities
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    job_id          String,
    policy          LowCardinality(String),
    score           Float64,
    components      Map(String, Float64),
    pending_reason  Nullable(String),
    epoch           UInt64
)
ENGINE = ReplacingMergeTree
ORDER BY (job_id, ts, event_id);

CREATE TABLE IF NOT EXISTS forecasts
(
    event_id        String,
    generated_at    DateTime64(3, 'UTC'),
    series          LowCardinality(String),
    metric          LowCardinality(String),
    model           LowCardinality(String),
    step_s          UInt32,
    interval_width  Float32,
    target_ts       DateTime64(3, 'UTC'),
    yhat            Float64,
    lower           Float64,
    upper           Float64,
    note            Nullable(String)
)
ENGINE = ReplacingMergeTree
ORDER BY (series, generated_at, target_ts, event_id);

CREATE TABLE IF NOT EXISTS node_views
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    node_id         LowCardinality(String),
    gpu_model       LowCardinality(String),
    gpus_total      UInt16,
    gpus_allocatable Float32,
    gpus_allocated  Float32,
    utilization_pct Float32,
    power_w         Float32,
    power_state     LowCardinality(String),
    healthy         Bool,
    stale_gpus      Array(String),
    last_seen       Nullable(DateTime64(3, 'UTC'))
)
ENGINE = ReplacingMergeTree
ORDER BY (node_id, ts, event_id);

CREATE TABLE IF NOT EXISTS control_params
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    name            LowCardinality(String),
    value           String,
    set_by          String
)
ENGINE = ReplacingMergeTree
ORDER BY (name, ts, event_id);
