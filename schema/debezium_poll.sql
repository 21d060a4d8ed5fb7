-- debezium_poll: what relay.capture = poll adds to Debezium's outbox table
-- (relay.profile = debezium), so that the relay can claim its rows and mark
-- them, and a trigger that wakes the relay. The view the relay reads the
-- table through ({{table}}: the columns under the relay's names) is written
-- by outbox-relay migrate after this script: its columns follow the
-- configuration (relay.column_*, relay.additional_placement).
--
-- A template: {{source}} is Debezium's table, {{table}} the view (its name
-- ends in _relay), {{table:x}} the quoted identifier "<view>_x".
--
-- Every change leaves the application's rows as they are and rewrites
-- nothing: each column is added without a default, or with a constant one
-- (kept in the catalog, not written into the rows), and the defaults that
-- new rows need are set afterwards. The rows already there count as sent
-- ("relay_sent_at" reads '-infinity' for them): they are the connector's,
-- which publishes every row committed before this transaction once its slot
-- has moved past it. The rows inserted after it are the relay's. Each
-- statement checks before it creates, so the script can run again; it then
-- changes nothing the relay relies on.

CREATE SEQUENCE IF NOT EXISTS {{schema}}.{{table:seq}} AS bigint;

ALTER TABLE {{schema}}.{{source}}
    ADD COLUMN IF NOT EXISTS "relay_seq"        bigint,
    ADD COLUMN IF NOT EXISTS "relay_created_at" timestamptz,
    ADD COLUMN IF NOT EXISTS "relay_sent_at"    timestamptz DEFAULT '-infinity',
    ADD COLUMN IF NOT EXISTS "relay_attempts"   int NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS "relay_last_error" text,
    ADD COLUMN IF NOT EXISTS "relay_dead_at"    timestamptz;

-- New rows: claimed in insert order, not sent yet.
ALTER TABLE {{schema}}.{{source}}
    ALTER COLUMN "relay_seq" SET DEFAULT nextval('{{schema}}.{{table:seq}}'),
    ALTER COLUMN "relay_created_at" SET DEFAULT clock_timestamp(),
    ALTER COLUMN "relay_sent_at" DROP DEFAULT;
ALTER SEQUENCE {{schema}}.{{table:seq}} OWNED BY {{schema}}.{{source}}."relay_seq";

-- Where the connector's rows end: every row that counts as sent committed
-- before this position (the table is locked since the ALTER above, so no
-- other insert commits before this transaction does). Kept from the first
-- run only: later runs add no such row. The relay starts only once the
-- connector's slot (relay.slot) has confirmed past it, so that no row of
-- the connector's is left unpublished and no aggregate's events change
-- order across the switch.
DO $do$
BEGIN
    IF obj_description('{{schema}}.{{table:seq}}'::regclass, 'pg_class') IS NULL THEN
        EXECUTE format('COMMENT ON SEQUENCE {{schema}}.{{table:seq}} IS %L',
                       'outbox-relay: the rows committed before WAL position '
                       || pg_current_wal_insert_lsn() || ' are the connector''s');
    END IF;
END
$do$;

-- relay_seq is the relay's id: its marks, failures, verify and replay find
-- rows by it (NULL, the connector's rows, any number of times).
CREATE UNIQUE INDEX IF NOT EXISTS {{table:seq_idx}}
    ON {{schema}}.{{source}} ("relay_seq");

-- The claim's "oldest rows not sent and not dead", and the dead rows that
-- hold their aggregate: partial indexes, small however many rows are sent.
CREATE INDEX IF NOT EXISTS {{table:pending_idx}}
    ON {{schema}}.{{source}} ("relay_seq")
    WHERE "relay_sent_at" IS NULL AND "relay_dead_at" IS NULL;
CREATE INDEX IF NOT EXISTS {{table:dead_idx}}
    ON {{schema}}.{{source}} ("relay_seq")
    WHERE "relay_dead_at" IS NOT NULL AND "relay_sent_at" IS NULL;

-- One NOTIFY per statement, and none while the leading relay claims anyway:
-- the function {{table:notify}} is schema/004's (rendered for the view
-- before this script), keyed on the view the relay claims through.
DROP TRIGGER IF EXISTS {{table:notify_trg}} ON {{schema}}.{{source}};
CREATE TRIGGER {{table:notify_trg}}
    AFTER INSERT ON {{schema}}.{{source}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{table:notify}}();
