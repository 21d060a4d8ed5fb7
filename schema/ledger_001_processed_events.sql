-- ledger_001_processed_events: the consumer's side of the outbox. A ledger of
-- the events each consumer has applied, so that a consumer receiving an
-- event again (the relay delivers at least once; `outbox-relay replay`
-- publishes on purpose) applies it once.
--
-- A template like the outbox migrations, rendered for the ledger's name
-- (`outbox-relay migrate --ledger NAME`): the table NAME, the functions
-- NAME_first_seen and NAME_purge.
-- Applied by outbox-relay migrate --ledger NAME (recorded, idempotent), or
-- printed by migrate --print-sql --ledger NAME for Flyway, Liquibase, sqitch.
--
-- Per message, in ONE transaction with the change it causes:
--   BEGIN;
--   SELECT {{schema}}.{{table:first_seen}}('billing', $event_id);  -- false: already applied
--   -- if true: the domain change
--   COMMIT;
-- and commit the Kafka offset after the transaction.

CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE IF NOT EXISTS {{schema}}.{{table}} (
    "consumer"     text NOT NULL,        -- who applied it (one ledger serves many consumers)
    "event_id"     uuid NOT NULL,        -- the message's event_id header
    "processed_at" timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY ("consumer", "event_id")
);

-- Retention walks the oldest rows first.
CREATE INDEX IF NOT EXISTS {{table:processed_at_idx}}
    ON {{schema}}.{{table}} ("processed_at");

-- true the first time p_consumer sees p_event_id, false every later time.
-- Two transactions racing on one event: the second waits for the first, and
-- returns false if it committed (true if it rolled back).
CREATE OR REPLACE FUNCTION {{schema}}.{{table:first_seen}}(p_consumer text, p_event_id uuid)
RETURNS boolean
LANGUAGE sql AS $fn$
    WITH ins AS (
        INSERT INTO {{schema}}.{{table}} ("consumer", "event_id")
        VALUES (p_consumer, p_event_id)
        ON CONFLICT DO NOTHING
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM ins);
$fn$;

-- Retention: deletes at most p_limit entries processed more than p_older_than
-- ago (oldest first) and returns how many; call it until it returns 0, e.g.
-- from cron or pg_cron: SELECT {{schema}}.{{table:purge}}('30 days');
-- Keep entries longer than any duplicate can arrive: Kafka's retention of the
-- topics, and as far back as you would ever replay.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:purge}}(p_older_than interval,
                                                      p_limit int DEFAULT 10000)
RETURNS bigint
LANGUAGE sql AS $fn$
    WITH d AS (
        DELETE FROM {{schema}}.{{table}}
         WHERE ("consumer", "event_id") IN (
               SELECT "consumer", "event_id" FROM {{schema}}.{{table}}
                WHERE "processed_at" < clock_timestamp() - p_older_than
                ORDER BY "processed_at" LIMIT p_limit)
        RETURNING 1)
    SELECT count(*) FROM d;
$fn$;
