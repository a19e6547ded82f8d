-- GPU utilization by GPU model and hour: mean utilization of the samples, GPU-hours
-- sampled, and the energy they stand for (power x sampling interval).
SELECT
    gpu_model,
    toStartOfHour(ts) AS hour,
    uniqExact(gpu_uuid) AS gpus,
    round(avg(utilization_pct), 2) AS avg_utilization_pct,
    round(sum(interval_s) / 3600, 3) AS gpu_hours,
    round(sum(power_w * interval_s) / 3.6e6, 4) AS energy_kwh
FROM telemetry FINAL
GROUP BY gpu_model, hour
ORDER BY hour, gpu_model
