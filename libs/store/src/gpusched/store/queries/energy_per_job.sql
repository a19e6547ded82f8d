-- Energy per job: the GPU energy of every sample taken while the job held the GPU
-- (power x sampling interval), with its tenant and class from the submission.
SELECT
    t.job_id AS job_id,
    j.tenant AS tenant,
    j.priority_class AS priority_class,
    round(sum(t.interval_s) / 3600, 3) AS gpu_hours,
    round(sum(t.power_w * t.interval_s) / 3.6e6, 4) AS energy_kwh
FROM telemetry AS t FINAL
LEFT JOIN
(
    SELECT job_id, any(tenant) AS tenant, any(priority_class) AS priority_class
    FROM job_events FINAL
    WHERE type = 'submitted'
    GROUP BY job_id
) AS j ON t.job_id = j.job_id
WHERE t.job_id IS NOT NULL
GROUP BY job_id, tenant, priority_class
ORDER BY energy_kwh DESC, job_id
