-- 004_quiet_notify: no NOTIFY while the leading relay is claiming anyway.
--
-- A NOTIFY is not free for the application: PostgreSQL serialises the commits
-- of all notifying transactions of the cluster behind one lock. Under a steady
-- stream of events the relay claims one batch after another and needs no
-- wake-up, so while it does it holds the quiet lock (an advisory lock keyed on
-- the table) and the trigger leaves the NOTIFY out. Cheap lock probes replace
-- it; none of them ever waits.
--
-- A transaction that leaves its NOTIFY out holds the skip lock (shared) until
-- it ends. The relay stops being quiet by releasing the quiet lock, then waits
-- until it can take the skip lock (no such transaction is still open) before
-- it claims the last time: a row whose transaction sent no NOTIFY is claimed
-- all the same. The second probe of the quiet lock covers a transaction that
-- took the skip lock after that check: the relay was no longer quiet by then.
-- A relay that exits or loses its connection drops both locks with its session.
CREATE OR REPLACE FUNCTION {{schema}}.{{table:notify}}() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF pg_try_advisory_lock_shared({{lock:quiet}}) THEN
        PERFORM pg_advisory_unlock_shared({{lock:quiet}});
        PERFORM pg_notify({{channel}}, '');
    ELSIF NOT pg_try_advisory_xact_lock_shared({{lock:skip}}) THEN
        PERFORM pg_notify({{channel}}, '');
    ELSIF pg_try_advisory_lock_shared({{lock:quiet}}) THEN
        PERFORM pg_advisory_unlock_shared({{lock:quiet}});
        PERFORM pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$fn$;
