-- objects: what the migrations leave behind for one table, as a query that
-- returns one row per object that is missing. Empty: the schema is whole.
--
-- The migrations ledger records what was applied, not what still exists: a
-- table dropped by hand keeps its ledger rows. outbox-relay migrate runs this
-- after the ledger says every migration is in; if something is missing it
-- applies the migrations again (each is idempotent), then runs this again.
-- Superseded objects (002's dead_idx, 005's dropped indexes) are not listed: this is the state after
-- the last migration. A template with the placeholders of the migrations;
-- valid identifiers hold no quotes, so '"' || name || '"' compares a catalog
-- name with a rendered (quoted) one.
WITH t(oid) AS (SELECT to_regclass('{{schema}}.{{table}}'))
SELECT 'table {{schema}}.{{table}}' FROM t WHERE t.oid IS NULL
UNION ALL
SELECT 'column "' || c.name || '"'
  FROM t, unnest(ARRAY['id', 'event_id', 'aggregate_type', 'aggregate_id', 'event_type', 'topic',
                       'payload', 'headers', 'created_at', 'sent_at', 'attempts', 'last_error',
                       'dead_at', 'xid']) WITH ORDINALITY AS c(name, n)
 WHERE t.oid IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                    WHERE a.attrelid = t.oid AND a.attname = c.name AND a.attnum > 0
                      AND NOT a.attisdropped)
UNION ALL
SELECT 'index ' || i.name
  FROM t, (VALUES ('{{table:xid_idx}}'), ('{{table:created_idx}}'),
                  ('{{table:dead_hash_idx}}'), ('{{table:failed_idx}}')) AS i(name)
 WHERE t.oid IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
                    WHERE x.indrelid = t.oid AND '"' || ic.relname || '"' = i.name)
UNION ALL
SELECT 'constraint "' || k.name || '"'
  FROM t, (VALUES ('aggregate_id_bytes'), ('aggregate_type_bytes'), ('event_type_bytes'),
                  ('topic_bytes')) AS k(name)
 WHERE t.oid IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = t.oid AND conname = k.name)
UNION ALL
SELECT 'trigger ' || g.name
  FROM t, (VALUES ('{{table:notify_trg}}')) AS g(name)
 WHERE t.oid IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = t.oid AND '"' || tgname || '"' = g.name)
UNION ALL
SELECT 'table {{schema}}.{{table:floor}}' WHERE to_regclass('{{schema}}.{{table:floor}}') IS NULL
UNION ALL
SELECT 'function ' || f.sig
  FROM (VALUES ('{{schema}}.{{table:notify}}()'),
               ('{{schema}}.{{table:enqueue}}(text,text,text,jsonb,jsonb,text)')) AS f(sig)
 WHERE to_regprocedure(f.sig) IS NULL;
