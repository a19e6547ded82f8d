-- Idle GPU-hours by GPU model and node: time sampled with no job on the GPU, and the
-- energy drawn meanwhile (what parking idle nodes can save).
SELECT
    gpu_model,
    node_id,
    round(sumIf(interval_s, job_id IS NULL) / 3600, 3) AS idle_gpu_hours,
    round(sum(interval_s) / 3600, 3) AS gpu_hours,
    round(sumIf(power_w * interval_s, job_id IS NULL) / 3.6e6, 4) AS idle_energy_kwh
FROM telemetry FINAL
GROUP BY gpu_model, node_id
HAVING idle_gpu_hours > 0
ORDER BY idle_gpu_hours DESC, node_id
