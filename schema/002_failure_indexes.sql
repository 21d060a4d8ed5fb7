-- 002_failure_indexes: indexes for the failure and retention paths.

-- hold_aggregate: the claim skips rows behind a dead row of their aggregate.
-- Dead rows are few, so this index stays tiny.
CREATE INDEX IF NOT EXISTS {{table:dead_idx}}
    ON {{schema}}.{{table}} ("aggregate_type", "aggregate_id", "id")
    WHERE "dead_at" IS NOT NULL AND "sent_at" IS NULL;

-- Retention deletes the oldest sent rows in small batches without scanning
-- the table.
CREATE INDEX IF NOT EXISTS {{table:sent_idx}}
    ON {{schema}}.{{table}} ("sent_at")
    WHERE "sent_at" IS NOT NULL;
