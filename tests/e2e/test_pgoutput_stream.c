/* test_pgoutput_stream.c — the pgoutput decoder (relay/core/pgoutput.c) against what
 * the test stack's PostgreSQL (wal_level = logical) really sends: a slot of
 * the built-in pgoutput plugin read through pg_logical_slot_get_binary_changes,
 * with the options log-based capture uses (proto_version 1, a publication of
 * inserts, logical messages). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/pgoutput.h"
#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    if (T.conn)
        PQclear(PQexec(T.conn, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                               "WHERE slot_name = 'e2e_pgoutput'"));
    e2e_teardown(&T);
}

static void value_is(const struct pgo_msg *m, const char *col, const char *want)
{
    const struct pgo_value *v = pgo_column(m, col);
    cr_assert_not_null(v, "no column %s", col);
    if (!want) {
        cr_assert_null(v->text, "%s is not NULL", col);
        return;
    }
    cr_assert(v->text && v->len == strlen(want) && !memcmp(v->text, want, v->len),
              "%s is %.*s, expected %s", col, (int)v->len, v->text ? v->text : "", want);
}

Test(e2e, pgoutput_decodes_what_postgresql_sends, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "pgoutput");
    e2e_migrate(&T);
    e2e_exec(T.conn, "DROP PUBLICATION IF EXISTS e2e_pgoutput_pub");
    e2e_exec(T.conn, "CREATE PUBLICATION e2e_pgoutput_pub FOR TABLE %s WITH (publish = 'insert')",
             T.qtable);
    e2e_exec(T.conn, "SELECT pg_create_logical_replication_slot('e2e_pgoutput', 'pgoutput')");
    /* Two rows and a message in one transaction; a row inserted and deleted
     * in the same transaction; a transaction rolled back. */
    e2e_exec(T.conn, "BEGIN; SELECT %s('order', 'o-1', 'Placed', '{\"seq\": 1}'); "
                     "SELECT %s('order', 'o-2', 'Placed', NULL, '{\"h\": \"v\"}'); "
                     "SELECT pg_logical_emit_message(true, 'outbox', '{\"x\": 1}'); COMMIT",
             T.qenqueue, T.qenqueue);
    e2e_exec(T.conn, "BEGIN; SELECT %s('order', 'o-3', 'Placed', NULL); DELETE FROM %s; COMMIT",
             T.qenqueue, T.qtable);
    e2e_exec(T.conn, "BEGIN; SELECT %s('order', 'o-4', 'Placed', NULL); ROLLBACK", T.qenqueue);
    /* With synchronous_commit off a commit reaches the slot once the WAL
     * writer flushed it. */
    e2e_sleep_ms(1000);
    PGresult *r = PQexecParams(T.conn,
        "SELECT data FROM pg_logical_slot_get_binary_changes('e2e_pgoutput', NULL, NULL, "
        "'proto_version', '1', 'publication_names', 'e2e_pgoutput_pub', 'messages', 'true')",
        0, NULL, NULL, NULL, NULL, 1);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));

    struct pgo_relations rels = { 0 };
    char kinds[32] = "";
    const char *aggs[4] = { 0 };
    int n_ins = 0;
    uint64_t last_end = 0;
    for (int i = 0; i < PQntuples(r) && i < 31; i++) {
        struct pgo_msg m;
        int rc = pgo_decode(&rels, (const uint8_t *)PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0), &m);
        cr_assert_eq(rc, 0, "message %d (%c) failed to decode: %d", i, PQgetvalue(r, i, 0)[0], rc);
        kinds[i] = "BCRIMO"[m.kind];
        if (m.kind == PGO_INSERT) {
            value_is(&m, "aggregate_type", "order");
            value_is(&m, "event_type", "Placed");
            const struct pgo_value *a = pgo_column(&m, "aggregate_id");
            aggs[n_ins++] = strndup(a->text, a->len);
            if (n_ins == 1) {
                value_is(&m, "payload", "{\"seq\": 1}");
                value_is(&m, "headers", NULL);
            }
            if (n_ins == 2)
                value_is(&m, "headers", "{\"h\": \"v\"}");
            cr_assert_not_null(pgo_column(&m, "event_id")->text, "no event_id");
        }
        if (m.kind == PGO_MESSAGE) {
            cr_assert_str_eq(m.prefix, "outbox");
            cr_assert(m.transactional);
            cr_assert_eq(m.content_len, 8);
            cr_assert_eq(memcmp(m.content, "{\"x\": 1}", 8), 0);
        }
        if (m.kind == PGO_COMMIT) {
            cr_assert_gt(m.end_lsn, last_end, "commits out of LSN order");
            last_end = m.end_lsn;
        }
    }
    PQclear(r);
    /* B R I I M C for the first transaction, B I C for the second (its
     * DELETE is not published); nothing of the rolled-back one. */
    cr_assert_str_eq(kinds, "BRIIMCBIC");
    cr_assert_str_eq(aggs[0], "o-1");
    cr_assert_str_eq(aggs[1], "o-2");
    cr_assert_str_eq(aggs[2], "o-3");
    pgo_relations_free(&rels);
    e2e_exec(T.conn, "DROP PUBLICATION e2e_pgoutput_pub");
}
