-- Hourly GPU utilization and energy per node and GPU model, kept up to date on insert.
-- Energy of a sample = power_w x interval_s (the time the sample stands for).

CREATE TABLE IF NOT EXISTS gpu_hourly
(
    hour            DateTime('UTC'),
    node_id         LowCardinality(String),
    gpu_model       LowCardinality(String),
    utilization     AggregateFunction(avg, Float32),
    energy_wh       SimpleAggregateFunction(sum, Float64),
    samples         SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
ORDER BY (hour, node_id, gpu_model);

CREATE MATERIALIZED VIEW IF NOT EXISTS gpu_hourly_mv TO gpu_hourly AS
SELECT
    toStartOfHour(ts)                       AS hour,
    node_id,
    gpu_model,
    avgState(utilization_pct)               AS utilization,
    sum(toFloat64(power_w) * interval_s / 3600) AS energy_wh,
    count()                                 AS samples
FROM telemetry
GROUP BY hour, node_id, gpu_model;
