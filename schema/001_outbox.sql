-- 001_outbox: the outbox table, its pending-row index, the NOTIFY trigger and
-- the enqueue function applications call.
--
-- A template: {{schema}} and {{table}} become quoted identifiers,
-- {{table:x}} the quoted identifier "<table>_x", {{channel}} a quoted literal.
-- outbox-relay migrate renders and applies it once per table, inside a
-- transaction under an advisory lock, and records it in outbox_relay_migrations.

CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE IF NOT EXISTS {{schema}}.{{table}} (
    "id"             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    "event_id"       uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    "aggregate_type" text NOT NULL,
    "aggregate_id"   text NOT NULL,
    "event_type"     text NOT NULL,
    "topic"          text NULL,        -- overrides the relay's topic template
    "payload"        jsonb NULL,       -- NULL is published as a tombstone
    "headers"        jsonb NULL,       -- an object; its string values become Kafka headers
    "created_at"     timestamptz NOT NULL DEFAULT clock_timestamp(),
    "sent_at"        timestamptz NULL, -- set by the relay only after Kafka acknowledged the event
    "attempts"       int NOT NULL DEFAULT 0,
    "last_error"     text NULL,
    "dead_at"        timestamptz NULL
);

-- The relay claims "oldest rows not sent and not dead": a partial index keeps
-- that cheap however many sent rows the table holds.
CREATE INDEX IF NOT EXISTS {{table:pending_idx}}
    ON {{schema}}.{{table}} ("id")
    WHERE "sent_at" IS NULL AND "dead_at" IS NULL;

-- One NOTIFY per statement, never per row: a 10,000-row INSERT wakes the relay once.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:notify}}() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify({{channel}}, '');
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS {{table:notify_trg}} ON {{schema}}.{{table}};
CREATE TRIGGER {{table:notify_trg}}
    AFTER INSERT ON {{schema}}.{{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{table:notify}}();

-- Applications call this in the same transaction as their domain change.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:enqueue}}(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT NULL,
    p_topic          text DEFAULT NULL
) RETURNS uuid
LANGUAGE sql AS $fn$
    INSERT INTO {{schema}}.{{table}}
        ("aggregate_type", "aggregate_id", "event_type", "payload", "headers", "topic")
    VALUES (p_aggregate_type, p_aggregate_id, p_event_type, p_payload, p_headers, p_topic)
    RETURNING "event_id";
$fn$;
