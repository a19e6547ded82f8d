-- The audit trail of parameter changes (issue 14): who asked for which revision, why and
-- from where (on control_params, one row per parameter of a revision), what each service
-- did with it (control_status, appended as the services report), and who submitted or
-- cancelled each job (job_events.actor), and which revision each priority was computed
-- under (priorities.params_revision). Both tables are append-only; param_changes joins
-- them into one row per parameter change with its outcome and when it was applied.

ALTER TABLE control_params ADD COLUMN IF NOT EXISTS revision UInt64 DEFAULT 0;
ALTER TABLE control_params ADD COLUMN IF NOT EXISTS changeset Nullable(String);
ALTER TABLE control_params ADD COLUMN IF NOT EXISTS role Nullable(String);
ALTER TABLE control_params ADD COLUMN IF NOT EXISTS source Nullable(String);
ALTER TABLE control_params ADD COLUMN IF NOT EXISTS old_value Nullable(String);
ALTER TABLE control_params ADD COLUMN IF NOT EXISTS reason Nullable(String);

ALTER TABLE job_events ADD COLUMN IF NOT EXISTS actor Nullable(String);
ALTER TABLE priorities ADD COLUMN IF NOT EXISTS params_revision UInt64 DEFAULT 0;

CREATE TABLE IF NOT EXISTS control_status
(
    event_id        String,
    ts              DateTime64(3, 'UTC'),
    service         LowCardinality(String),
    revision        UInt64,
    outcome         LowCardinality(String),
    name            Nullable(String),
    error           Nullable(String)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (service, revision, ts, event_id)
TTL toDateTime(ts) + INTERVAL 400 DAY;

-- One row per parameter of a revision asked for through the API. outcome: 'rejected'
-- when any service refused it (error says why), 'applied' once one did, else 'pending';
-- applied_at: when the last of the services that applied it did; applied_by: which.
CREATE VIEW IF NOT EXISTS param_changes AS
SELECT
    c.revision AS revision,
    c.changeset AS changeset,
    c.set_by AS actor,
    c.role AS role,
    c.source AS source,
    c.name AS parameter,
    c.old_value AS old_value,
    c.value AS new_value,
    c.reason AS reason,
    c.ts AS requested_at,
    multiIf(length(s.rejected_by) > 0, 'rejected', length(s.applied_by) > 0, 'applied', 'pending')
        AS outcome,
    s.error AS error,
    if(length(s.applied_by) > 0, s.applied_at, NULL) AS applied_at,
    s.applied_by AS applied_by
FROM (SELECT * FROM control_params FINAL WHERE revision > 0) AS c
LEFT JOIN
(
    SELECT
        revision,
        name,
        groupUniqArrayIf(service, outcome = 'applied') AS applied_by,
        groupUniqArrayIf(service, outcome = 'rejected') AS rejected_by,
        anyIf(error, outcome = 'rejected') AS error,
        max(first_at) AS applied_at
    FROM
    (
        SELECT revision, name, service, outcome, any(error) AS error, min(ts) AS first_at
        FROM control_status FINAL
        WHERE outcome != 'in_force'
        GROUP BY revision, name, service, outcome
    )
    GROUP BY revision, name
) AS s ON c.revision = s.revision AND c.name = s.name;
