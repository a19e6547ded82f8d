-- Readings of nodes without GPUs (gpusched.hosts.v1): that a CPU-only node is there and
-- how big it is, so the live view and analysts see every node, GPU or not.

CREATE TABLE IF NOT EXISTS host_samples
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    node_id         LowCardinality(String),
    cpu_milli       UInt32,
    memory_mib      UInt64,
    interval_s      Float32,
    source          LowCardinality(String)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (node_id, ts, event_id)
TTL toDateTime(ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;
