-- Energy per tenant: GPU energy of the samples taken while the tenant's jobs held the GPUs.
SELECT
    ifNull(j.tenant, '(unknown job)') AS tenant,
    uniqExact(t.job_id) AS jobs,
    round(sum(t.interval_s) / 3600, 3) AS gpu_hours,
    round(sum(t.power_w * t.interval_s) / 3.6e6, 4) AS energy_kwh
FROM telemetry AS t FINAL
LEFT JOIN
(
    SELECT job_id, any(tenant) AS tenant
    FROM job_events FINAL
    WHERE type = 'submitted'
    GROUP BY job_id
) AS j ON t.job_id = j.job_id
WHERE t.job_id IS NOT NULL
GROUP BY tenant
ORDER BY energy_kwh DESC, tenant
