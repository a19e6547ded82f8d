-- Stale GPUs: GPUs whose newest sample is more than 60 s older than the newest sample of
-- any GPU (so it works on replayed and time-compressed data too; use now64() for a live
-- cluster's wall clock). Change 60 to the processor's GPUSCHED_PROCESSOR_STALE_AFTER_S.
SELECT
    node_id,
    gpu_uuid,
    max(ts) AS last_seen,
    dateDiff('second', max(ts), (SELECT max(ts) FROM telemetry)) AS behind_s
FROM telemetry
GROUP BY node_id, gpu_uuid
HAVING behind_s > 60
ORDER BY behind_s DESC, node_id, gpu_uuid
