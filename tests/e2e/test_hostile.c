/* test_hostile.c — hostile and odd input: injection attempts in the
 * configured identifiers, a payload far over Kafka's limit, empty and
 * non-ASCII keys, text PostgreSQL itself refuses. Each row gets a clear
 * outcome — published, or dead with a reason — and the relay never crashes. */
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

/* Injection attempts in every identifier taken from the configuration, for
 * every command that reads it: exit 78 naming the key, before touching the
 * database (test_config.c covers table and schema for run/migrate). */
Test(e2e, identifier_injection_rejected_everywhere, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "inject");
    static const struct {
        const char *x;
        const char *key;
    } bad[] = {
        {"relay.notify_channel=outbox\"; NOTIFY x; --", "relay.notify_channel"},
        {"relay.notify_channel=a'b", "relay.notify_channel"},
        {"relay.notify_channel=chan nel", "relay.notify_channel"},
        {"relay.table=outbox; DROP TABLE t", "relay.table"},
        {"relay.table=outbox\"\"", "relay.table"},
        {"relay.schema=pg_catalog\".\"pg_class", "relay.schema"},
        {"relay.schema=public$1", "relay.schema"},
        {"relay.table=t\xc3\xa4" "ble", "relay.table"},
    };
    static const char *const cmds[][3] = {
        {"run", NULL}, {"migrate", NULL}, {"check-config", NULL}, {"dead", "list"}, {"dead", "requeue"},
    };
    struct e2e_report rep = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
            const char *args[E2E_MAX_ARGS];
            int n = 0;
            for (int k = 0; cmds[c][k]; k++)
                args[n++] = cmds[c][k];
            if (strcmp(cmds[c][0], "dead") == 0 && strcmp(cmds[c][1], "requeue") == 0)
                args[n++] = "--all";
            e2e_base_args(&T, args, &n);
            args[n++] = "-X";
            args[n++] = bad[i].x;
            args[n] = NULL;
            char *err = NULL;
            int rc = e2e_run_relay(args, 20000, NULL, &err);
            e2e_check(&rep, rc == 78 && err && strstr(err, bad[i].key),
                      "%s%s%s with -X '%s': exit %d (expected 78 naming %s): %.300s", cmds[c][0],
                      cmds[c][1] ? " " : "", cmds[c][1] ? cmds[c][1] : "", bad[i].x, rc, bad[i].key,
                      err ? err : "");
            free(err);
        }
    }
    /* Nothing was created under any of those names. */
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_class WHERE relname LIKE '%%DROP%%' "
                                  "OR relname LIKE '%%;%%' OR relname LIKE '%%\"%%'") == 0,
              "a relation with an injected name exists");
    e2e_report_assert(&rep, "identifier injection");
}

/* A 5 MB jsonb payload with librdkafka's default message.max.bytes (1 MB):
 * dead with a reason after one attempt, the rest of its aggregate held
 * (the default policy), everything else published — the relay stays up.
 * Rows with an empty aggregate_id ('' — NULL is refused by the table) are
 * published with an empty key, all in one partition, in order; non-ASCII
 * keys and values come through byte for byte. */
Test(e2e, huge_payload_and_odd_keys, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "hostile");
    e2e_migrate(&T);
    /* aggregate_id is NOT NULL: a NULL key can never reach the relay. */
    char sql[512];
    snprintf(sql, sizeof(sql), "SELECT %s('order', NULL, 'created', '{}')", T.qenqueue);
    PGresult *res = PQexec(T.conn, sql);
    cr_assert_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "a NULL aggregate_id was accepted");
    cr_assert_str_eq(PQresultErrorField(res, PG_DIAG_SQLSTATE), "23502", "expected not_null_violation");
    PQclear(res);

    e2e_exec(T.conn, "SELECT count(%s('order', '', 'created', jsonb_build_object('n', i))) "
             "FROM generate_series(1, 20) AS i", T.qenqueue);
    e2e_exec(T.conn, "SELECT %s('order', 'huge', 'created', jsonb_build_object('n', 0))", T.qenqueue);
    long long huge = e2e_query_int(T.conn,
        "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload) "
        "VALUES ('order', 'huge', 'created', jsonb_build_object('blob', repeat('x', 5 * 1024 * 1024))) "
        "RETURNING id", T.qtable);
    e2e_exec(T.conn, "SELECT %s('order', 'huge', 'created', jsonb_build_object('n', 2))", T.qenqueue);
    e2e_exec(T.conn, "SELECT count(%s('order', 'größe/ü ✓ ' || (i %% 3), 'créé', "
             "jsonb_build_object('text', 'naïve ☃ ' || i), jsonb_build_object('h', 'ü' || i))) "
             "FROM generate_series(1, 30) AS i", T.qenqueue);
    e2e_exec(T.conn, "SELECT count(%s('order', '', 'created', jsonb_build_object('n', 100 + i))) "
             "FROM generate_series(1, 20) AS i", T.qenqueue);

    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=7", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND aggregate_id <> 'huge') "
                           "AND EXISTS (SELECT 1 FROM %s WHERE id = %lld AND dead_at IS NOT NULL)",
                           T.qtable, T.qtable, huge),
              "rows around a 5 MB payload were not relayed, or the huge row is not dead");
    e2e_sleep_ms(500);

    struct e2e_report rep = {0};
    res = e2e_query(T.conn, "SELECT attempts, last_error, sent_at IS NULL FROM %s WHERE id = %lld", T.qtable,
                    huge);
    e2e_check(&rep, atoi(PQgetvalue(res, 0, 0)) == 1, "huge row: attempts %s, expected 1", PQgetvalue(res, 0, 0));
    e2e_check(&rep, strstr(PQgetvalue(res, 0, 1), "too large") != NULL,
              "huge row: last_error \"%s\" does not say the message is too large", PQgetvalue(res, 0, 1));
    PQclear(res);
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE aggregate_id = 'huge' AND id > %lld "
                                  "AND sent_at IS NULL AND dead_at IS NULL", T.qtable, huge) == 1,
              "the row behind the huge one is not held (hold_aggregate is the default)");
    e2e_check(&rep, e2e_relay_alive(relay), "the relay died");
    e2e_report_assert(&rep, "5 MB payload");

    /* Drop the huge row: what is behind it follows. */
    char id[24];
    snprintf(id, sizeof(id), "%lld", huge);
    const char *drop[] = {"drop", id, "--yes", NULL};
    char *out = NULL;
    cr_assert_eq(e2e_dead(&T, drop, NULL, &out, NULL), 0, "dead drop of the huge row failed");
    cr_assert(out && strstr(out, "dropped 1 row"), "dead drop said: %s", out ? out : "");
    free(out);
    e2e_wait_all_sent(&T, 30000);

    struct e2e_rows rows;
    e2e_rows_load(&T, &rows);
    size_t n_topics;
    char **topics = e2e_topics_of(&T, &rows, &n_topics);
    struct e2e_msgs msgs;
    e2e_consume((const char *const *)topics, n_topics, 60000, &msgs);
    struct e2e_report rep2 = {0};
    e2e_verify(&T, &rows, &msgs, &rep2); /* key, value, headers byte for byte; per-key order */
    for (size_t i = 0; i < rows.n; i++)
        e2e_check(&rep2, rows.v[i].deliveries == 1, "row %lld (key \"%s\") delivered %d times",
                  (long long)rows.v[i].id, rows.v[i].aggregate_id, rows.v[i].deliveries);
    int32_t empty_partition = -1;
    size_t empty_keys = 0;
    for (size_t i = 0; i < msgs.n; i++) {
        const struct e2e_msg *m = &msgs.v[i];
        if (!m->key || m->key_len != 0)
            continue;
        empty_keys++;
        if (empty_partition < 0)
            empty_partition = m->partition;
        e2e_check(&rep2, m->partition == empty_partition,
                  "messages with an empty key are in partitions %d and %d: their order is lost",
                  empty_partition, m->partition);
    }
    e2e_check(&rep2, empty_keys == 40, "%zu messages with an empty (not NULL) key, expected 40", empty_keys);
    e2e_check(&rep2, msgs.n == rows.n, "%zu messages for %zu rows", msgs.n, rows.n);
    e2e_report_assert(&rep2, "odd keys");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    e2e_msgs_free(&msgs);
    e2e_topics_free(topics);
    e2e_rows_free(&rows);
}

/* created_at is any timestamptz PostgreSQL holds: infinity, -infinity and a
 * date BC included. A claim once turned created_at into milliseconds on the
 * server, and one row stamped infinity made every claim fail ("cannot convert
 * infinity to bigint"): nothing at all was relayed. */
Test(e2e, created_at_at_the_ends_of_time, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "hostile_time");
    e2e_migrate(&T);
    static const char *const when[] = { NULL, "infinity", "-infinity", "0044-03-15 12:00:00+00 BC",
                                        "12345-01-01 00:00:00+00", NULL };
    static const char *const header[] = { NULL, "infinity", "-infinity",
                                          "-0043-03-15T12:00:00.000000Z",
                                          "+12345-01-01T00:00:00.000000Z", NULL };
    /* Milliseconds since the Unix epoch of the fixed finite ones (0: none). */
    static const int64_t stamp[] = { 0, 0, 0, -INT64_C(63517780800000), INT64_C(327403382400000), 0 };
    enum { N = sizeof when / sizeof when[0] };
    for (int i = 0; i < N; i++)
        e2e_exec(T.conn,
                 "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, created_at) "
                 "VALUES ('clock', 'c', 'tick', jsonb_build_object('n', %d), %s%s%s)",
                 T.qtable, i, when[i] ? "'" : "", when[i] ? when[i] : "clock_timestamp()",
                 when[i] ? "'::timestamptz" : "");
    const char *extra[] = { "relay.poll_interval_ms=50", NULL };
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 30000);

    char topic[256];
    snprintf(topic, sizeof topic, "%s.clock", T.table);
    const char *topics[] = { topic };
    struct e2e_msgs msgs;
    e2e_consume(topics, 1, 30000, &msgs);
    struct e2e_report rep = {0};
    e2e_check(&rep, msgs.n == N, "%zu messages for %d rows", msgs.n, N);
    for (size_t i = 0; i < msgs.n && i < N; i++) {
        const struct e2e_msg *m = &msgs.v[i];
        char want[32];
        snprintf(want, sizeof want, "{\"n\": %zu}", i);
        e2e_check(&rep, m->value && strcmp(m->value, want) == 0, "message %zu is %s, expected %s",
                  i, m->value ? m->value : "a tombstone", want);
        const char *h = e2e_msg_header(m, "created_at");
        if (header[i])
            e2e_check(&rep, h && strcmp(h, header[i]) == 0, "message %zu: created_at %s, expected %s",
                      i, h ? h : "missing", header[i]);
        else
            e2e_check(&rep, h && strlen(h) == 27 && h[10] == 'T' && h[26] == 'Z',
                      "message %zu: created_at %s is not RFC 3339", i, h ? h : "missing");
        /* An infinite created_at is stamped when it is sent, not at 0; the others carry it. */
        if (stamp[i] != 0)
            e2e_check(&rep, m->timestamp == stamp[i], "message %zu: timestamp %lld, expected %lld",
                      i, (long long)m->timestamp, (long long)stamp[i]);
        else
            e2e_check(&rep, m->timestamp > 0, "message %zu: timestamp %lld", i, (long long)m->timestamp);
    }
    e2e_report_assert(&rep, "created_at at the ends of time");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    e2e_msgs_free(&msgs);
}

/* Invalid UTF-8 (and NUL) cannot reach the relay: in a UTF8 database
 * PostgreSQL refuses such text, and jsonb refuses \u0000, at INSERT. This
 * documents why the relay has no code path for them. */
Test(e2e, invalid_text_refused_by_postgres, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "utf8");
    e2e_migrate(&T);
    char enc[16];
    PGresult *res = e2e_query(T.conn, "SELECT pg_encoding_to_char(encoding) FROM pg_database "
                              "WHERE datname = current_database()");
    snprintf(enc, sizeof(enc), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    if (strcmp(enc, "UTF8") != 0)
        cr_skip_test("the test database is %s, not UTF8", enc);

    static const struct {
        const char *what;
        const char *values;     /* after INSERT INTO <table> */
        const char *sqlstate;
    } cases[] = {
        {"invalid UTF-8 in aggregate_id",
         "(aggregate_type, aggregate_id, event_type) VALUES ('order', E'bad\\xff', 'created')", "22021"},
        {"invalid UTF-8 via convert_from",
         "(aggregate_type, aggregate_id, event_type) "
         "VALUES ('order', convert_from('\\xc328'::bytea, 'UTF8'), 'created')",
         "22021"},
        {"a NUL in text", "(aggregate_type, aggregate_id, event_type) VALUES ('order', chr(0), 'created')",
         "54000"},
        {"\\u0000 in jsonb",
         "(aggregate_type, aggregate_id, event_type, payload) "
         "VALUES ('order', 'x', 'created', '{\"a\": \"\\u0000\"}')",
         "22P05"},
    };
    struct e2e_report rep = {0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char sql[512];
        snprintf(sql, sizeof(sql), "INSERT INTO %s %s", T.qtable, cases[i].values);
        res = PQexec(T.conn, sql);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        e2e_check(&rep, PQresultStatus(res) == PGRES_FATAL_ERROR && state && !strcmp(state, cases[i].sqlstate),
                  "%s: expected SQLSTATE %s, got status %s state %s (%s)", cases[i].what, cases[i].sqlstate,
                  PQresStatus(PQresultStatus(res)), state ? state : "-", PQresultErrorMessage(res));
        PQclear(res);
    }
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable) == 0, "a row got in");
    e2e_report_assert(&rep, "text PostgreSQL refuses");
}
