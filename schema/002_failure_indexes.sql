-- 002_failure_indexes: indexes for the failure and retention paths.

-- hold_aggregate's dead-row index was created here first, on
-- (aggregate_type, aggregate_id, id). An index entry has a size limit, and a
-- long aggregate_id made its row impossible to dead-letter, so 003 replaces
-- it with an index on a hash of the key. It is no longer created here: migrate
-- applies every migration again when it repairs a schema, and this one must
-- not fail then on a table that holds long keys.

-- Retention deletes the oldest sent rows in small batches without scanning
-- the table.
CREATE INDEX IF NOT EXISTS {{table:sent_idx}}
    ON {{schema}}.{{table}} ("sent_at")
    WHERE "sent_at" IS NOT NULL;
