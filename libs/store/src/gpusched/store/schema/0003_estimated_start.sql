-- When the scheduling core expects a pending job to start (PriorityUpdate.estimated_start).

ALTER TABLE priorities ADD COLUMN IF NOT EXISTS estimated_start Nullable(DateTime64(3, 'UTC')) AFTER pending_reason;
