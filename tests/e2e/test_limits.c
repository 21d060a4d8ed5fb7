/* test_limits.c — limits and reserved names, end to end: over-long keys are
 * refused at enqueue; a table that already holds them (from before the
 * limits) still migrates and its rows can be dead-lettered; one row whose
 * failure cannot be recorded does not lose the other rows' records; row
 * headers cannot forge the relay's own; Kafka's internal topics cannot be
 * written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* An incompressible text of @p bytes hex digits (md5s), as a SQL expression:
 * a repeated character would compress and hide an index size limit. */
static const char *random_text_sql(int bytes)
{
    static char sql[160];
    snprintf(sql, sizeof(sql),
             "(SELECT left(string_agg(md5(random()::text || g::text), ''), %d) "
             "FROM generate_series(1, %d) AS g)",
             bytes, bytes / 32 + 1);
    return sql;
}

static long long insert_row(const char *aggregate_type, const char *aggregate_id_sql,
                            const char *headers_sql, const char *topic_sql, int n)
{
    return e2e_query_int(T.conn,
                         "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, headers, "
                         "topic) VALUES ('%s', %s, 'created', jsonb_build_object('n', %d), %s, %s) "
                         "RETURNING id",
                         T.qtable, aggregate_type, aggregate_id_sql, n, headers_sql ? headers_sql : "NULL",
                         topic_sql ? topic_sql : "NULL");
}

static long long insert_ok(const char *aggregate_id, int n)
{
    char key[96];
    snprintf(key, sizeof(key), "'%s'", aggregate_id);
    return insert_row("order", key, NULL, NULL, n);
}

/* A poison row: dead after exactly one attempt, never sent, last_error
 * saying @p why. */
static void check_dead(struct e2e_report *rep, long long id, const char *what, const char *why)
{
    PGresult *res = e2e_query(T.conn,
                              "SELECT attempts, dead_at IS NOT NULL, sent_at IS NOT NULL, "
                              "coalesce(last_error, '') FROM %s WHERE id = %lld",
                              T.qtable, id);
    if (e2e_check(rep, PQntuples(res) == 1, "%s: row %lld is gone", what, id)) {
        e2e_check(rep, atoi(PQgetvalue(res, 0, 0)) == 1, "%s: attempts %s, expected 1", what,
                  PQgetvalue(res, 0, 0));
        e2e_check(rep, PQgetvalue(res, 0, 1)[0] == 't', "%s: not dead", what);
        e2e_check(rep, PQgetvalue(res, 0, 2)[0] == 'f', "%s: marked sent", what);
        e2e_check(rep, strstr(PQgetvalue(res, 0, 3), why) != NULL,
                  "%s: last_error \"%.300s\" does not say \"%s\"", what, PQgetvalue(res, 0, 3), why);
    }
    PQclear(res);
}

/* Runs a statement expected to fail with @p sqlstate and a message containing @p msg. */
static void expect_refused(struct e2e_report *rep, const char *what, const char *sql, const char *sqlstate,
                           const char *msg)
{
    PGresult *res = PQexec(T.conn, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    e2e_check(rep, PQresultStatus(res) == PGRES_FATAL_ERROR && state && !strcmp(state, sqlstate),
              "%s: expected SQLSTATE %s, got %s %s", what, sqlstate, PQresStatus(PQresultStatus(res)),
              state ? state : "-");
    const char *m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    e2e_check(rep, m && strstr(m, msg), "%s: message \"%.300s\" does not say \"%s\"", what, m ? m : "", msg);
    PQclear(res);
}

/* The limits are in the schema: the enqueue function names the argument and
 * the limit, a plain INSERT meets the constraint; bytes count, not
 * characters; values at the limit pass. */
Test(e2e, key_limits_refused_at_enqueue, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "keylimit");
    e2e_migrate(&T);
    struct e2e_report rep = {0};
    char sql[1024];
    static const struct {
        const char *what, *args, *msg;
    } over[] = {
        {"aggregate_id of 1025 bytes", "'order', repeat('k', 1025), 'created', NULL",
         "aggregate_id is 1025 bytes long; the limit is 1024 bytes"},
        {"aggregate_id of 513 characters, 1026 bytes", "'order', repeat('\xc3\xa9', 513), 'created', NULL",
         "aggregate_id is 1026 bytes long"},
        {"aggregate_type of 256 bytes", "repeat('t', 256), 'k', 'created', NULL",
         "aggregate_type is 256 bytes long; the limit is 255 bytes"},
        {"event_type of 256 bytes", "'order', 'k', repeat('e', 256), NULL",
         "event_type is 256 bytes long; the limit is 255 bytes"},
        {"topic of 250 bytes", "'order', 'k', 'created', NULL, NULL, repeat('t', 250)",
         "topic is 250 bytes long; Kafka allows at most 249"},
    };
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        snprintf(sql, sizeof(sql), "SELECT %s(%s)", T.qenqueue, over[i].args);
        expect_refused(&rep, over[i].what, sql, "23514", over[i].msg);
    }
    /* A plain INSERT is refused by the constraint, named after the column. */
    snprintf(sql, sizeof(sql),
             "INSERT INTO %s (aggregate_type, aggregate_id, event_type) VALUES ('order', %s, 'created')",
             T.qtable, random_text_sql(4096));
    expect_refused(&rep, "INSERT of a 4 KB aggregate_id", sql, "23514", "aggregate_id_bytes");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable) == 0, "a refused row got in");

    /* At the limits: accepted. */
    e2e_exec(T.conn, "SELECT %s(repeat('t', 255), repeat('k', 1024), repeat('e', 255), NULL, NULL, "
             "repeat('t', 249))", T.qenqueue);
    e2e_exec(T.conn, "SELECT %s('order', repeat('\xc3\xa9', 512), 'created', NULL)", T.qenqueue);
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable) == 2,
              "rows at the limits were not stored");
    e2e_report_assert(&rep, "key limits");
}

/* A table from before migration 003 that holds a 4 KB aggregate_id: migrate
 * still succeeds (the constraints are NOT VALID), and once a row with that
 * key is poison it is dead-lettered — its dead-row index entry no longer
 * holds the key — together with a poison row of another aggregate in the
 * same batch. Everything else is relayed once, in order; the row behind the
 * dead one waits for it (hold_aggregate) and follows when it is dropped. */
Test(e2e, long_key_from_before_the_limits_is_dead_lettered, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "longkey");
    e2e_migrate(&T);
    /* Back to the state after migration 002: 003's objects gone (and 005's
     * dead-row index, which replaced 003's), 002's dead-row index on the
     * text, the ledger at version 2. */
    e2e_exec(T.conn, "ALTER TABLE %s DROP CONSTRAINT aggregate_id_bytes, DROP CONSTRAINT aggregate_type_bytes, "
             "DROP CONSTRAINT event_type_bytes, DROP CONSTRAINT topic_bytes", T.qtable);
    e2e_exec(T.conn, "DROP INDEX \"public\".\"%s_dead_hash_idx\"", T.table);
    e2e_exec(T.conn, "CREATE INDEX \"%s_dead_idx\" ON %s (aggregate_type, aggregate_id, id) "
             "WHERE dead_at IS NOT NULL AND sent_at IS NULL", T.table, T.qtable);
    e2e_exec(T.conn, "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE table_name = 'public.%s' "
             "AND version >= 3", T.table);

    int n = 0;
    for (int i = 0; i < 4; i++)
        insert_ok("a", n++);
    e2e_exec(T.conn, "CREATE TEMP TABLE longkey AS SELECT %s AS k", random_text_sql(4096));
    long long long_first = insert_row("order", "(SELECT k FROM longkey)", NULL, NULL, n++);
    long long long_poison = insert_row("order", "(SELECT k FROM longkey)", NULL, "'not a topic!'", n++);
    long long long_later = insert_row("order", "(SELECT k FROM longkey)", NULL, NULL, n++);
    long long other_poison = insert_row("order", "'c'", NULL, "'no topic either!'", n++);
    for (int i = 0; i < 4; i++)
        insert_ok(i % 2 ? "a" : "b", n++);

    /* What broke before: the old index cannot take the dead row. */
    e2e_exec(T.conn, "BEGIN");
    char sql[512];
    snprintf(sql, sizeof(sql), "UPDATE %s SET dead_at = now() WHERE id = %lld", T.qtable, long_poison);
    PGresult *res = PQexec(T.conn, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    cr_assert(state && !strcmp(state, "54000"), "the 002 index took a 4 KB key (%s): this test shows nothing",
              state ? state : "no error");
    PQclear(res);
    state = NULL;
    e2e_exec(T.conn, "ROLLBACK");

    /* migrate brings the table to 003 although rows break its limits. */
    e2e_migrate(&T);
    struct e2e_report rep = {0};
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = '%s'::regclass "
                                  "AND conname LIKE '%%_bytes' AND NOT convalidated", T.qtable) == 4,
              "the four limits are not there as NOT VALID constraints");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE octet_length(aggregate_id) = 4096",
                                  T.qtable) == 3, "the rows with a 4 KB key are not all there");
    /* The unsent rows that break the limit are exempt from it (else marking
     * them sent would fail); rows written from now on are not. */
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = '%s'::regclass "
                                  "AND conname = 'aggregate_id_bytes' "
                                  "AND pg_get_constraintdef(oid) LIKE '%%id <= %lld)%%'",
                                  T.qtable, long_later) == 1,
              "the 4 KB rows are not exempt from the aggregate_id limit");
    snprintf(sql, sizeof(sql), "INSERT INTO %s (aggregate_type, aggregate_id, event_type) "
             "VALUES ('order', (SELECT k FROM longkey), 'created')", T.qtable);
    res = PQexec(T.conn, sql);
    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    e2e_check(&rep, state && !strcmp(state, "23514"), "a new 4 KB key was accepted after the migration (%s)",
              state ? state : "no error");
    PQclear(res);
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_indexes WHERE tablename = '%s' "
                                  "AND indexdef LIKE '%%aggregate_id)%%'", T.table) == 0,
              "an index still holds the aggregate_id text");
    e2e_report_assert(&rep, "migrate over a table with 4 KB keys");

    const char *extra[] = {"relay.batch_size=20", "relay.poll_interval_ms=100", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT count(*) = 2 FROM %s WHERE dead_at IS NOT NULL", T.qtable),
              "the two poison rows were not dead-lettered");
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND dead_at IS NULL "
                           "AND id <> %lld)", T.qtable, long_later),
              "rows not behind the dead one were not all relayed");
    e2e_sleep_ms(500);

    struct e2e_report rep2 = {0};
    check_dead(&rep2, long_poison, "poison row with a 4 KB key", "invalid topic name");
    check_dead(&rep2, other_poison, "poison row of aggregate c", "invalid topic name");
    e2e_check(&rep2, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id = %lld AND sent_at IS NOT NULL",
                                   T.qtable, long_first) == 1, "the row before the poison one is not sent");
    e2e_check(&rep2, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id = %lld AND sent_at IS NULL "
                                   "AND dead_at IS NULL AND attempts = 0", T.qtable, long_later) == 1,
              "the row behind the dead one is not waiting (hold_aggregate)");
    e2e_check(&rep2, e2e_relay_log_count(relay, "recording") == 0, "a failure record failed (see the log)");
    e2e_report_assert(&rep2, "dead-lettering with a 4 KB key");

    char id[24];
    snprintf(id, sizeof(id), "%lld", long_poison);
    const char *drop[] = {"drop", id, "--yes", NULL};
    cr_assert_eq(e2e_dead(&T, drop, NULL, NULL, NULL), 0, "dead drop failed");
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT sent_at IS NOT NULL FROM %s WHERE id = %lld", T.qtable, long_later),
              "the row behind the dropped one was not relayed");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    e2e_verify_sent_once(&T, "4 KB key");
}

/* One row whose failure the table will not take (a trigger refuses it, as
 * the old dead-row index did a long key): the other failures of its batch
 * are still recorded, the rest of the batch is marked, the relay stays up;
 * once the trigger is gone the row is recorded too. */
Test(e2e, one_unrecordable_failure_keeps_the_others, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "recfall");
    e2e_migrate(&T);
    e2e_exec(T.conn,
             "CREATE FUNCTION \"public\".\"%s_refuse\"() RETURNS trigger LANGUAGE plpgsql AS $$ "
             "BEGIN RAISE EXCEPTION 'this row refuses its failure record'; END $$",
             T.table);
    e2e_exec(T.conn,
             "CREATE TRIGGER refuse BEFORE UPDATE ON %s FOR EACH ROW "
             "WHEN (NEW.aggregate_id = 'cursed' AND NEW.attempts > OLD.attempts) "
             "EXECUTE FUNCTION \"public\".\"%s_refuse\"()",
             T.qtable, T.table);

    int n = 0;
    long long poison[3], cursed;
    for (int i = 0; i < 3; i++)
        insert_ok("a", n++);
    poison[0] = insert_row("order", "'p0'", NULL, "'bad topic 0'", n++);
    cursed = insert_row("order", "'cursed'", NULL, "'bad topic c'", n++);
    poison[1] = insert_row("order", "'p1'", NULL, "'bad topic 1'", n++);
    for (int i = 0; i < 3; i++)
        insert_ok("b", n++);
    poison[2] = insert_row("order", "'p2'", NULL, "'bad topic 2'", n++);
    for (int i = 0; i < 3; i++)
        insert_ok(i % 2 ? "a" : "b", n++);

    const char *extra[] = {"relay.batch_size=50", "relay.poll_interval_ms=200", "relay.on_poison=dead_letter",
                           NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT count(*) = 3 FROM %s WHERE dead_at IS NOT NULL", T.qtable),
              "the failures next to the unrecordable one were not recorded");
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT count(*) = 9 FROM %s WHERE sent_at IS NOT NULL", T.qtable),
              "the healthy rows were not all relayed");
    cr_assert(e2e_relay_wait_log(relay, "recording them row by row", 10000), "no fallback in the log");
    cr_assert(e2e_relay_wait_log(relay, "recording the failure of a row failed", 10000),
              "the unrecordable row is not named in the log");

    struct e2e_report rep = {0};
    for (int i = 0; i < 3; i++)
        check_dead(&rep, poison[i], "poison row next to the unrecordable one", "invalid topic name");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id = %lld AND attempts = 0 "
                                  "AND dead_at IS NULL AND sent_at IS NULL", T.qtable, cursed) == 1,
              "the unrecordable row changed");
    char needle[64];
    snprintf(needle, sizeof(needle), "outbox_id=%lld", cursed);
    e2e_check(&rep, e2e_relay_log_contains(relay, needle), "the log does not name row %lld", cursed);
    e2e_check(&rep, e2e_relay_alive(relay), "the relay died");
    e2e_report_assert(&rep, "failure records next to an unrecordable one");

    e2e_exec(T.conn, "DROP TRIGGER refuse ON %s", T.qtable);
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT dead_at IS NOT NULL FROM %s WHERE id = %lld", T.qtable, cursed),
              "the row was not recorded once the table took it");
    struct e2e_report rep2 = {0};
    check_dead(&rep2, cursed, "the formerly unrecordable row", "invalid topic name");
    e2e_report_assert(&rep2, "after the trigger is gone");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    e2e_verify_sent_once(&T, "failure-record fallback");
}

/* Headers named like the relay's own, topics of Kafka's internals (from the
 * row, or rendered from the template): poison, dead after one attempt with
 * a last_error that says why, never produced. A header name that only looks
 * alike (Event_ID) is the row's own and published. A long non-ASCII header
 * name makes an error message that had to be cut: still recorded. */
Test(e2e, reserved_headers_and_internal_topics_are_poison, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "reserved");
    /* The aggregate_type is the whole topic, so a row can render "__…". */
    snprintf(T.topic_template, sizeof(T.topic_template), "${aggregate_type}");
    e2e_migrate(&T);

    char agg[96];
    snprintf(agg, sizeof(agg), "%s", T.table); /* unique per run: a fresh topic */
    int n = 0;
    struct bad {
        long long id;
        const char *what, *why;
    } bad[6];
    int nb = 0;
    for (int i = 0; i < 3; i++)
        insert_row(agg, "'a'", NULL, NULL, n++);
    bad[nb++] = (struct bad){insert_row(agg, "'f1'", "'{\"trace\": \"t\", \"event_id\": \"forged\"}'", NULL, n++),
                                 "forged event_id header", "headers member \"event_id\" is reserved"};
    bad[nb++] = (struct bad){insert_row(agg, "'f2'", "'{\"outbox_id\": \"1\"}'", NULL, n++),
                                 "forged outbox_id header", "headers member \"outbox_id\" is reserved"};
    bad[nb++] = (struct bad){insert_row(agg, "'t1'", NULL, "'__consumer_offsets'", n++),
                                 "row topic __consumer_offsets",
                                 "\"__consumer_offsets\": names starting with \"__\" are reserved"};
    bad[nb++] = (struct bad){insert_row("__transaction_state", "'t2'", NULL, NULL, n++),
                                 "template rendering __transaction_state",
                                 "names starting with \"__\" are reserved for Kafka's internal topics"};
    bad[nb++] = (struct bad){insert_row(agg, "'u'", "jsonb_build_object(repeat('\xc3\xa9', 300), 5)", NULL, n++),
                                 "long non-ASCII header name, not a string", "\\xc3\\xa9...\" is not a string"};
    for (int i = 0; i < 3; i++)
        insert_row(agg, "'a'", "'{\"Event_ID\": \"mine\", \"trace\": \"x\"}'", NULL, n++);
    insert_row(agg, "'f1'", NULL, NULL, n++);
    insert_row(agg, "'t1'", NULL, NULL, n++);

    const char *extra[] = {"relay.batch_size=7", "relay.poll_interval_ms=100", "relay.on_poison=dead_letter",
                           NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT count(*) = %d FROM %s WHERE dead_at IS NOT NULL", nb, T.qtable),
              "the poison rows were not all dead-lettered");
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL "
                                      "AND dead_at IS NULL)", T.qtable),
              "the other rows were not all relayed");
    struct e2e_report rep = {0};
    for (int i = 0; i < nb; i++)
        check_dead(&rep, bad[i].id, bad[i].what, bad[i].why);
    /* Refused before producing: no delivery report failed for them. */
    e2e_check(&rep, e2e_relay_log_count(relay, "delivery failed") == 0, "a poison row reached Kafka");
    e2e_check(&rep, e2e_relay_log_count(relay, "recording") == 0, "a failure record failed");
    e2e_report_assert(&rep, "reserved names");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    e2e_verify_sent_once(&T, "reserved names"); /* Event_ID arrives as the row's own header */
}
