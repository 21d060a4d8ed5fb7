-- 005_hot_mark: marking a row sent writes no index entry and no new page.
--
-- PostgreSQL updates a row in place (a HOT update) when no index names a
-- column the UPDATE changes and the new version fits on the row's page. The
-- mark sets "sent_at" only, so no index may name "sent_at" (the pending-row and
-- sent-row indexes did), and every page keeps room for a second version of
-- its rows: fillfactor 45, as a batch marks a page's rows in one statement and
-- each version grows by the 8 bytes of "sent_at". A mark then costs about a
-- third of what a non-HOT update costs, and leaves no index entries to vacuum.
--
-- Without the pending-row index the relay claims from a floor (relay/core/
-- sql.c, build_claim_and_mark): every unsent row it could see when it last
-- claimed has an id at or above the floor, and a row it could not see then
-- belongs to a transaction that was open, or had not begun: "xid" holds the
-- id of the transaction that wrote the row, or that last made it claimable
-- again (`outbox-relay dead requeue` and `dead drop` give a requeued row and
-- the rows its aggregate held behind a dead row their own), so such a row is
-- found through "xid_idx". No trigger does it: a row trigger on the table,
-- even one that never fires for the mark, made every mark a third slower.
-- The floor is kept in the table {{table:floor}} so a relay that starts again
-- does not scan the sent rows below it.
LOCK TABLE {{schema}}.{{table}} IN ACCESS EXCLUSIVE MODE;

-- No default at first, so no row is rewritten: the rows already in the table
-- keep a NULL "xid" and are found by their id (the floor starts below them).
ALTER TABLE {{schema}}.{{table}} ADD COLUMN IF NOT EXISTS "xid" xid8 NULL;
ALTER TABLE {{schema}}.{{table}} ALTER COLUMN "xid" SET DEFAULT pg_current_xact_id();
-- With the id: the claim's rows below the floor are found in the index
-- alone, without reading the rows of the same transactions above it.
CREATE INDEX IF NOT EXISTS {{table:xid_idx}} ON {{schema}}.{{table}} ("xid", "id");

-- The floor, one row. Its start: the lowest unsent row (nothing can insert
-- while this migration holds the table's lock), and the oldest transaction
-- still open, whose rows may come later.
CREATE TABLE IF NOT EXISTS {{schema}}.{{table:floor}} (
    "one"        bool PRIMARY KEY DEFAULT true CHECK ("one"),
    "floor_id"   bigint NOT NULL,
    "floor_xmin" xid8 NOT NULL,
    "saved_at"   timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO {{schema}}.{{table:floor}} ("floor_id", "floor_xmin")
SELECT COALESCE((SELECT min("id") FROM {{schema}}.{{table}}
                  WHERE "sent_at" IS NULL AND "dead_at" IS NULL), 0),
       pg_snapshot_xmin(pg_current_snapshot())
ON CONFLICT ("one") DO NOTHING;

-- The relay reads and writes the floor: every role that may mark rows (UPDATE
-- on the outbox table) gets the same on it. A role granted UPDATE on the
-- outbox later needs SELECT and UPDATE on the floor table too.
DO $do$
DECLARE
    g oid;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee
               FROM pg_class AS c, aclexplode(c.relacl) AS a
              WHERE c.oid = '{{schema}}.{{table}}'::regclass AND a.privilege_type = 'UPDATE'
                AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON {{schema}}.{{table:floor}} TO %s',
                       CASE WHEN g = 0 THEN 'PUBLIC' ELSE g::regrole::text END);
    END LOOP;
END
$do$;

DROP INDEX IF EXISTS {{schema}}.{{table:pending_idx}};

-- Retention reads the oldest rows by creation: a row is sent after it was
-- created, so "created_at" bounds the sent rows old enough to go.
CREATE INDEX IF NOT EXISTS {{table:created_idx}} ON {{schema}}.{{table}} ("created_at");
DROP INDEX IF EXISTS {{schema}}.{{table:sent_idx}};

-- hold_aggregate's dead-row index, without "sent_at" (a dead row is never
-- marked: the relay marks only what Kafka acknowledged).
CREATE INDEX IF NOT EXISTS {{table:dead_hash_idx}}
    ON {{schema}}.{{table}} (hashtextextended("aggregate_id", 0), "id")
    WHERE "dead_at" IS NOT NULL;
DROP INDEX IF EXISTS {{schema}}.{{table:dead_key_idx}};

-- The rows that failed at least once, for `outbox-relay dead list`. A mark
-- does not change "attempts", so it stays a HOT update.
CREATE INDEX IF NOT EXISTS {{table:failed_idx}} ON {{schema}}.{{table}} ("id")
    WHERE "attempts" > 0;

ALTER TABLE {{schema}}.{{table}} SET (fillfactor = 45);
