-- A batch the sink inserts again after a crash (inserted, not yet committed to Kafka)
-- counts once: every insert carries an insert_deduplication_token, which ClickHouse
-- remembers for the last N blocks of a table (non_replicated_deduplication_window; a
-- Replicated table has its own window in Keeper), including the materialized view's
-- target gpu_hourly (deduplicate_blocks_in_dependent_materialized_views at insert time).
-- The raw tables collapse duplicates by event id anyway (ReplacingMergeTree, read FINAL);
-- the hourly aggregate cannot, so it depends on this.

ALTER TABLE telemetry MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE job_events MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE placements MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE priorities MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE forecasts MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE node_views MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE control_params MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE control_status MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE gpu_hourly MODIFY SETTING non_replicated_deduplication_window = 10000;

-- The sink's batch plans: before it inserts a batch, the offset range of each partition
-- in it. After a crash, a plan whose ranges start at the committed offsets was inserted
-- (perhaps partly) but not committed: the sink reads exactly those ranges again as its
-- first batch, so the batch and its tokens are the same and ClickHouse skips what it has.
CREATE TABLE IF NOT EXISTS sink_batches
(
    consumer_group  LowCardinality(String),
    batch_id        String,
    topic           LowCardinality(String),
    partition       UInt32,
    first_offset    Int64,
    last_offset     Int64,
    planned_at      DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(planned_at)
ORDER BY (consumer_group, topic, partition)
TTL toDateTime(planned_at) + INTERVAL 7 DAY;
