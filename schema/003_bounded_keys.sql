-- 003_bounded_keys: limits on the text Kafka and the indexes depend on, an
-- index that holds no unbounded text, and an enqueue function that says which
-- limit a row broke.
--
-- Limits, in bytes (octet_length: Kafka counts bytes, not characters):
--   aggregate_id    1024  the Kafka key
--   aggregate_type   255  a header, and usually part of the topic
--   event_type       255  a header, maybe part of the topic
--   topic            249  Kafka's own limit on a topic name
-- They are written twice below, in the constraints and in the enqueue
-- function; keep the two in step.

-- Rows already in the table may break a limit, and migrate must not fail on
-- them: they are still relayed or dead-lettered. NOT VALID alone is not
-- enough: PostgreSQL checks a constraint on every new row version, so the
-- relay's UPDATE marking such a row sent would fail (and with it the marks of
-- its whole batch). So a limit exempts the ids up to the last unsent row that
-- breaks it (the relay never updates a sent row); found through the pending
-- and dead-row indexes, under the table lock ADD CONSTRAINT takes anyway, so
-- no such row can slip in meanwhile. NOT VALID still: validating would scan
-- every sent row while writers wait. Each constraint is looked up before it
-- is added, so this migration can run again.
DO $do$
DECLARE
    c record;
    grandfathered bigint;
BEGIN
    LOCK TABLE {{schema}}.{{table}} IN ACCESS EXCLUSIVE MODE;
    FOR c IN SELECT * FROM (VALUES
            ('aggregate_id_bytes',   'octet_length("aggregate_id") <= 1024'),
            ('aggregate_type_bytes', 'octet_length("aggregate_type") <= 255'),
            ('event_type_bytes',     'octet_length("event_type") <= 255'),
            ('topic_bytes',          'octet_length("topic") <= 249')) AS v(name, expr)
    LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_constraint
                              WHERE conrelid = '{{schema}}.{{table}}'::regclass
                                AND conname = c.name);
        EXECUTE format('SELECT greatest('
                       '(SELECT max("id") FROM {{schema}}.{{table}} WHERE "sent_at" IS NULL '
                       'AND "dead_at" IS NULL AND NOT (%1$s)), '
                       '(SELECT max("id") FROM {{schema}}.{{table}} WHERE "dead_at" IS NOT NULL '
                       'AND "sent_at" IS NULL AND NOT (%1$s)))', c.expr)
            INTO grandfathered;
        IF grandfathered IS NULL THEN
            EXECUTE format('ALTER TABLE {{schema}}.{{table}} ADD CONSTRAINT %I CHECK (%s) NOT VALID',
                           c.name, c.expr);
        ELSE
            RAISE WARNING 'unsent rows with id <= % break the limit % (%); they are exempt from it',
                grandfathered, c.name, c.expr;
            EXECUTE format('ALTER TABLE {{schema}}.{{table}} ADD CONSTRAINT %I '
                           'CHECK (%s OR "id" <= %s) NOT VALID', c.name, c.expr, grandfathered);
        END IF;
    END LOOP;
END
$do$;

-- hold_aggregate's dead-row index, keyed by a hash of the aggregate_id
-- instead of the text: an index entry has a size limit (a third of a page),
-- and a row whose entry does not fit cannot be dead-lettered at all. The
-- claim compares the hash (to use this index) and then the text itself, so
-- a collision only costs a recheck. It replaces 002's dead_idx.
CREATE INDEX IF NOT EXISTS {{table:dead_key_idx}}
    ON {{schema}}.{{table}} (hashtextextended("aggregate_id", 0), "id")
    WHERE "dead_at" IS NOT NULL AND "sent_at" IS NULL;
DROP INDEX IF EXISTS {{schema}}.{{table:dead_idx}};

-- The same function, now refusing what the constraints would refuse with a
-- message that names the argument and the limit (a constraint's message
-- would quote the whole row, key included).
CREATE OR REPLACE FUNCTION {{schema}}.{{table:enqueue}}(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT NULL,
    p_topic          text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $fn$
DECLARE
    v_event_id uuid;
BEGIN
    IF octet_length(p_aggregate_id) > 1024 THEN
        RAISE EXCEPTION 'aggregate_id is % bytes long; the limit is 1024 bytes (it is the Kafka key)',
            octet_length(p_aggregate_id)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'aggregate_id_bytes';
    END IF;
    IF octet_length(p_aggregate_type) > 255 THEN
        RAISE EXCEPTION 'aggregate_type is % bytes long; the limit is 255 bytes',
            octet_length(p_aggregate_type)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'aggregate_type_bytes';
    END IF;
    IF octet_length(p_event_type) > 255 THEN
        RAISE EXCEPTION 'event_type is % bytes long; the limit is 255 bytes',
            octet_length(p_event_type)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'event_type_bytes';
    END IF;
    IF octet_length(p_topic) > 249 THEN
        RAISE EXCEPTION 'topic is % bytes long; Kafka allows at most 249',
            octet_length(p_topic)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'topic_bytes';
    END IF;
    INSERT INTO {{schema}}.{{table}}
        ("aggregate_type", "aggregate_id", "event_type", "payload", "headers", "topic")
    VALUES (p_aggregate_type, p_aggregate_id, p_event_type, p_payload, p_headers, p_topic)
    RETURNING "event_id" INTO v_event_id;
    RETURN v_event_id;
END
$fn$;
