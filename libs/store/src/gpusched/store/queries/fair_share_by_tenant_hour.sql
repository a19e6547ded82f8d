-- Fair share over time: per hour, each tenant's part of the GPU time its jobs held (from
-- the telemetry samples taken while they held GPUs) beside its fair share. gpusched gives
-- every tenant an equal share, so the fair share of an hour is 1 / the tenants holding GPUs.
SELECT
    hour,
    tenant,
    gpu_hours,
    round(gpu_hours / sum(gpu_hours) OVER (PARTITION BY hour), 4) AS used_share,
    round(1 / count() OVER (PARTITION BY hour), 4) AS fair_share
FROM
(
    SELECT
        toStartOfHour(t.ts) AS hour,
        ifNull(j.tenant, '(unknown job)') AS tenant,
        round(sum(t.interval_s) / 3600, 4) AS gpu_hours
    FROM telemetry AS t FINAL
    LEFT JOIN
    (
        SELECT job_id, any(tenant) AS tenant
        FROM job_events FINAL
        WHERE type = 'submitted'
        GROUP BY job_id
    ) AS j ON t.job_id = j.job_id
    WHERE t.job_id IS NOT NULL
    GROUP BY hour, tenant
)
ORDER BY hour, tenant
