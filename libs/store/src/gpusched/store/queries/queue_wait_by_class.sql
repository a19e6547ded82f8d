-- Queue wait by priority class: from a job's submission to its first placement, for the
-- jobs that have started.
SELECT
    priority_class,
    count() AS jobs_started,
    round(avg(wait_s), 1) AS avg_wait_s,
    round(quantile(0.5)(wait_s), 1) AS p50_wait_s,
    round(quantile(0.99)(wait_s), 1) AS p99_wait_s
FROM
(
    SELECT
        job_id,
        anyIf(priority_class, type = 'submitted') AS priority_class,
        dateDiff('millisecond', minIf(ts, type = 'submitted'),
                 minIf(ts, type IN ('placed', 'running'))) / 1000 AS wait_s
    FROM job_events FINAL
    GROUP BY job_id
    HAVING countIf(type = 'submitted') > 0 AND countIf(type IN ('placed', 'running')) > 0
)
GROUP BY priority_class
ORDER BY priority_class
