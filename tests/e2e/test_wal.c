/* test_wal.c — relay.capture = wal: the outbox read from a pgoutput slot.
 *
 * What a user checks: every committed row reaches Kafka once, with the same
 * topic, key, value, timestamp and headers polling would give it, in order
 * per aggregate, while the table is never written by the relay; rows of
 * rolled-back transactions never arrive; rows inserted and deleted in one
 * transaction, and logical messages in the documented envelope, do; the
 * slot is confirmed only up to what Kafka holds, so a slot that stops
 * moving or is missing shows. */
#include <inttypes.h>
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

static void setup(const char *name)
{
    e2e_setup(&T, name);
    e2e_wal_enable(&T);
    e2e_migrate(&T);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' "
                                       "AND plugin = 'pgoutput'", T.table), 1,
                 "migrate did not create the slot");
}

/* Rows of aggregate type "order" over @p keys aggregates, one transaction. */
static void write_rows(PGconn *c, const char *key_prefix, int keys, int lo, int hi)
{
    e2e_exec(c,
             "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, headers) "
             "SELECT 'order', '%s' || (i %% %d), 'changed', "
             "  CASE WHEN i %% 97 = 0 THEN NULL ELSE jsonb_build_object('i', i, 'note', 'n' || i) END, "
             "  CASE WHEN i %% 10 = 0 THEN jsonb_build_object('trace', 't' || i) END "
             "FROM generate_series(%d, %d) AS i",
             T.qtable, key_prefix, keys, lo, hi);
}

static void read_back_once(int expected_rows)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 60000, &rows, &msgs, &rep);
    e2e_check(&rep, rows.n == (size_t)expected_rows, "%zu rows in the table, expected %d", rows.n,
              expected_rows);
    for (size_t i = 0; i < rows.n; i++)
        e2e_check(&rep, rows.v[i].deliveries == 1, "row %" PRId64 " delivered %d times",
                  rows.v[i].id, rows.v[i].deliveries);
    e2e_report_assert(&rep, "wal capture");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

/* A backlog, then live writes: two writers whose transactions commit out of
 * id order, and a rolled-back one. */
static void order_without_writes(const char *name, const char *const *extra)
{
    setup(name);
    for (int k = 0; k < 10; k++)
        write_rows(T.conn, "k", 300, k * 1000 + 1, k * 1000 + 1000);
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
              "the relay did not stream (log %s)", r->log_path);

    /* The leader holds the quiet lock: writers send no NOTIFY nobody reads. */
    PGconn *listener = e2e_pg_connect();
    e2e_exec(listener, "LISTEN \"%s\"", T.channel);
    e2e_sleep_ms(500); /* the lock is taken right after the leader's first step */
    write_rows(T.conn, "quiet", 5, 40001, 40010);
    e2e_sleep_ms(200);
    PQconsumeInput(listener);
    PGnotify *note = PQnotifies(listener);
    cr_assert_null(note, "a writer sent a NOTIFY although the leader holds the quiet lock");
    PQfinish(listener);

    /* B's rows get higher ids but commit first. */
    PGconn *b = e2e_pg_connect();
    e2e_exec(b, "BEGIN");
    write_rows(b, "late", 5, 20001, 20100);
    write_rows(T.conn, "early", 5, 20101, 20200);
    e2e_exec(b, "COMMIT");
    e2e_exec(b, "BEGIN");
    write_rows(b, "gone", 5, 20201, 20300);
    e2e_exec(b, "ROLLBACK");
    PQfinish(b);
    for (int k = 0; k < 20; k++) {
        write_rows(T.conn, "k", 300, 30001 + k * 50, 30050 + k * 50);
        e2e_sleep_ms(10);
    }
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed past the last commit (log %s)",
              r->log_path);
    read_back_once(10000 + 10 + 200 + 1000);
    cr_assert_eq(e2e_count_where(&T, "sent_at IS NOT NULL OR attempts > 0"), 0,
                 "the relay wrote rows of the table");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0, "the relay did not exit 0 on SIGTERM");
}

Test(e2e, wal_relays_committed_rows_in_order_without_writing_the_table, .fini = fini, .timeout = 200)
{
    order_without_writes("walorder", NULL);
}

/* The same with the idempotent producer alone: the slot is confirmed from
 * each message's acknowledgement instead of a transaction's commit. */
Test(e2e, wal_without_kafka_transactions, .fini = fini, .timeout = 200)
{
    const char *extra[] = {"relay.fencing=none", NULL};
    order_without_writes("walnofence", extra);
}

/* The message with @p event_id among @p m, or NULL. */
static const struct e2e_msg *find_event(const struct e2e_msgs *m, const char *event_id)
{
    for (size_t i = 0; i < m->n; i++) {
        const char *e = e2e_msg_header(&m->v[i], "event_id");
        if (e && strcmp(e, event_id) == 0)
            return &m->v[i];
    }
    return NULL;
}

Test(e2e, wal_relays_rows_deleted_in_their_transaction_and_messages, .fini = fini, .timeout = 120)
{
    setup("walmsg");
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
              "the relay did not stream (log %s)", r->log_path);
    /* The pattern Debezium's documentation recommends: the table stays empty. */
    e2e_exec(T.conn, "BEGIN");
    PGresult *ins = e2e_query(T.conn,
                              "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload) "
                              "SELECT 'order', 'd' || (i %% 7), 'placed', jsonb_build_object('i', i) "
                              "FROM generate_series(1, 50) i RETURNING id, event_id::text, aggregate_id",
                              T.qtable);
    e2e_exec(T.conn, "DELETE FROM %s", T.qtable);
    e2e_exec(T.conn, "COMMIT");
    /* Table-less events; another prefix is not ours. */
    e2e_exec(T.conn,
             "SELECT pg_logical_emit_message(true, 'outbox', '{\"aggregate_type\":\"order\","
             "\"aggregate_id\":\"m1\",\"event_type\":\"noted\",\"payload\":{\"a\": [1, 2]},"
             "\"headers\":{\"trace\":\"x\"},\"event_id\":\"3f0a0b4e-5f7e-4a51-9d1c-2f0e8d6c1a11\"}')");
    PGresult *lsn = e2e_query(T.conn,
                              "SELECT pg_logical_emit_message(true, 'outbox', '{\"aggregate_type\":\"order\","
                              "\"aggregate_id\":\"m2\",\"event_type\":\"noted\"}')::text");
    e2e_exec(T.conn, "SELECT pg_logical_emit_message(true, 'other', '{}')");
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed (log %s)", r->log_path);

    char topic[160];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    const char *topics[] = {topic};
    struct e2e_msgs m;
    e2e_consume_from(T.kafka, true, topics, 1, 60000, &m);
    struct e2e_report rep = {0};
    e2e_check(&rep, m.n == 52, "%zu messages, expected 50 rows and 2 messages", m.n);
    for (int i = 0; i < PQntuples(ins); i++) {
        const struct e2e_msg *x = find_event(&m, PQgetvalue(ins, i, 1));
        if (!e2e_check(&rep, x != NULL, "deleted row %s did not arrive", PQgetvalue(ins, i, 0)))
            continue;
        const char *oid = e2e_msg_header(x, "outbox_id");
        e2e_check(&rep, oid && strcmp(oid, PQgetvalue(ins, i, 0)) == 0, "row %s: outbox_id %s",
                  PQgetvalue(ins, i, 0), oid ? oid : "(none)");
        e2e_check(&rep, x->key && strcmp(x->key, PQgetvalue(ins, i, 2)) == 0, "row %s: key %s",
                  PQgetvalue(ins, i, 0), x->key ? x->key : "(null)");
    }
    const struct e2e_msg *m1 = find_event(&m, "3f0a0b4e-5f7e-4a51-9d1c-2f0e8d6c1a11");
    if (e2e_check(&rep, m1 != NULL, "the message with its own event_id did not arrive")) {
        e2e_check(&rep, m1->key && strcmp(m1->key, "m1") == 0, "message key %s", m1->key ? m1->key : "");
        e2e_check(&rep, m1->value && strcmp(m1->value, "{\"a\":[1,2]}") == 0, "message value %s",
                  m1->value ? m1->value : "(null)");
        const char *tr = e2e_msg_header(m1, "trace"), *et = e2e_msg_header(m1, "event_type");
        e2e_check(&rep, tr && strcmp(tr, "x") == 0, "message header trace %s", tr ? tr : "(none)");
        e2e_check(&rep, et && strcmp(et, "noted") == 0, "message header event_type %s", et ? et : "(none)");
        e2e_check(&rep, e2e_msg_header(m1, "outbox_id") == NULL, "a message without a row has outbox_id");
    }
    /* Without an event_id, the message's LSN names it: the same on every replay. */
    unsigned hi = 0, lo = 0;
    cr_assert_eq(sscanf(PQgetvalue(lsn, 0, 0), "%X/%X", &hi, &lo), 2);
    char derived[40];
    snprintf(derived, sizeof derived, "%08x-0000-8000-8000-0000%08x", hi, lo);
    const struct e2e_msg *m2 = find_event(&m, derived);
    if (e2e_check(&rep, m2 != NULL, "no message with the derived event_id %s", derived))
        e2e_check(&rep, m2->value == NULL, "a message without payload is not a tombstone");
    e2e_report_assert(&rep, "deleted rows and messages");
    PQclear(ins);
    PQclear(lsn);
    e2e_msgs_free(&m);
}

Test(e2e, wal_without_its_slot_is_not_ready, .fini = fini, .timeout = 60)
{
    setup("walnoslot");
    const char *extra[] = {"relay.slot=e2e_no_such_slot", "relay.reconnect_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "cannot stream from the replication slot", 30000),
              "no error about the slot (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "does not exist");
    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    cr_assert(strstr(body, "outbox_relay_slot_lost 1"), "slot_lost is not 1:\n%.2000s", body);
    free(body);
}

/* Under on_poison = halt an event that can never be produced stops the
 * stream before it: nothing after it is confirmed, so nothing is skipped, and
 * a restart stops there again. */
Test(e2e, wal_poison_event_halts_before_it, .fini = fini, .timeout = 120)
{
    setup("walpoison");
    write_rows(T.conn, "k", 10, 1, 100);
    e2e_exec(T.conn, "SELECT pg_logical_emit_message(true, 'outbox', '{\"aggregate_type\":\"order\"}')");
    write_rows(T.conn, "k", 10, 101, 200);
    const char *halt[] = {"relay.on_poison=halt", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, halt);
    cr_assert(e2e_relay_wait_log(r, "relaying halted", 30000), "the relay did not halt (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "aggregate_id");
    cr_assert(e2e_wal_wait_confirmed(&T, 3000) == false, "the slot moved past the poison event");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
    r = e2e_relay_start(&T, halt);
    cr_assert(e2e_relay_wait_log(r, "relaying halted", 30000), "the restarted relay did not halt again (log %s)",
              r->log_path);
    char topic[160];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    const char *topics[] = {topic};
    struct e2e_msgs m;
    e2e_consume_from(T.kafka, true, topics, 1, 30000, &m);
    size_t after = 0;
    for (size_t i = 0; i < m.n; i++)
        after += atoll(e2e_msg_header(&m.v[i], "outbox_id")) > 100;
    cr_assert_eq(after, 0, "%zu rows after the poison event were relayed", after);
    cr_assert_geq(m.n, 100, "rows before the poison event: %zu", m.n);
    e2e_msgs_free(&m);
}

/* By default an event that can never be produced is kept as a dead row and
 * only it is held back: the rows after it, of every aggregate, are relayed;
 * its transaction is confirmed once the dead row is written. */
Test(e2e, wal_poison_events_are_dead_lettered_and_the_rest_goes_on, .fini = fini, .timeout = 120)
{
    setup("waldead");
    write_rows(T.conn, "k", 10, 1, 100);
    e2e_exec(T.conn, "SELECT pg_logical_emit_message(true, 'outbox', '{\"aggregate_type\":\"order\"}')");
    e2e_exec(T.conn, "INSERT INTO %s (aggregate_type, aggregate_id, event_type, topic, payload) "
                     "VALUES ('order', 'k1', 'changed', 'not a topic!', '{}')", T.qtable);
    write_rows(T.conn, "k", 10, 101, 200);
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed past the poison events (log %s)",
              r->log_path);
    /* The bad row itself is dead; the message left a dead copy with what it said. */
    cr_assert_eq(e2e_count_where(&T, "dead_at IS NOT NULL AND topic = 'not a topic!' AND last_error LIKE "
                                     "'%%invalid topic%%'"), 1, "the bad row is not dead-lettered");
    cr_assert_eq(e2e_count_where(&T, "dead_at IS NOT NULL AND last_error LIKE '%%aggregate_id%%' AND "
                                     "last_error LIKE '%%content: {\"aggregate_type\":\"order\"}%%'"), 1,
                 "the bad message left no dead row");
    char *out = NULL;
    const char *words[] = {"list", NULL};
    cr_assert_eq(e2e_dead(&T, words, NULL, &out, NULL), 0);
    cr_assert(strstr(out, "not a topic!") || strstr(out, "invalid topic"), "dead list:\n%s", out);
    free(out);
    char topic[160];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    const char *topics[] = {topic};
    struct e2e_msgs m;
    e2e_consume_from(T.kafka, true, topics, 1, 30000, &m);
    cr_assert_eq(m.n, 200, "%zu messages, expected the 200 good rows", m.n);
    e2e_msgs_free(&m);
    cr_assert(e2e_relay_alive(r), "the relay exited (log %s)", r->log_path);
    e2e_assert_readyz(r, 200, NULL);
}

/* PostgreSQL invalidates a slot that keeps more WAL than
 * max_slot_wal_keep_size: the events after its confirmed position may be
 * gone. The relay must say so and stop being ready, never go on as if
 * nothing were missing. (This lane's PostgreSQL is the test's alone while it
 * runs: the e2e tests of a lane run one at a time.) */
Test(e2e, wal_invalidated_slot_is_reported_not_skipped, .fini = fini, .timeout = 180)
{
    setup("wallost");
    write_rows(T.conn, "k", 10, 1, 100);
    e2e_exec(T.conn, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
    e2e_exec(T.conn, "SELECT pg_reload_conf()");
    /* Enough WAL behind the slot for the checkpoint to remove what it needs. */
    e2e_exec(T.conn, "CREATE TABLE %s_filler AS SELECT i, repeat('x', 100) AS pad "
                     "FROM generate_series(1, 400000) i", T.table);
    e2e_exec(T.conn, "SELECT pg_switch_wal()");
    e2e_exec(T.conn, "CHECKPOINT");
    bool lost = e2e_wait_sql(&T, 30000, "SELECT wal_status = 'lost' FROM pg_replication_slots "
                                        "WHERE slot_name = '%s'", T.table);
    e2e_exec(T.conn, "ALTER SYSTEM RESET max_slot_wal_keep_size");
    e2e_exec(T.conn, "SELECT pg_reload_conf()");
    e2e_exec(T.conn, "DROP TABLE %s_filler", T.table);
    cr_assert(lost, "PostgreSQL did not invalidate the slot");

    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(r, "cannot stream from the replication slot", 30000),
              "no error about the slot (log %s)", r->log_path);
    cr_assert(e2e_relay_log_contains(r, "verify"), "the error does not say what to do (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "invalidated");
    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    cr_assert(strstr(body, "outbox_relay_slot_lost 1"), "slot_lost is not 1:\n%.2000s", body);
    free(body);
    cr_assert_eq(e2e_relay_http_get(r, "/status", &body), 200);
    cr_assert(strstr(body, "\"lost\""), "/status does not show wal_status lost:\n%.3000s", body);
    free(body);
    char *out = NULL;
    const char *argv[] = {"slot", "status", NULL};
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    for (; argv[n]; n++)
        args[n] = argv[n];
    e2e_base_args(&T, args, &n);
    args[n] = NULL;
    cr_assert_eq(e2e_run_relay(args, 30000, &out, NULL), 1, "slot status must fail on a lost slot:\n%s", out);
    free(out);
}

/* An idle outbox on a busy database: without events the slot would stay put
 * and hold the WAL the other tables write; the heartbeat moves it. */
Test(e2e, wal_heartbeat_moves_the_slot_of_an_idle_outbox, .fini = fini, .timeout = 60)
{
    setup("walbeat");
    const char *extra[] = {"relay.heartbeat_interval=1s", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000), "log %s", r->log_path);
    e2e_exec(T.conn, "CREATE TABLE %s_other AS SELECT i FROM generate_series(1, 10000) i", T.table);
    PGresult *res = e2e_query(T.conn, "SELECT pg_current_wal_lsn()::text");
    char after[64];
    snprintf(after, sizeof after, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    bool moved = e2e_wait_sql(&T, 15000, "SELECT confirmed_flush_lsn >= '%s'::pg_lsn FROM "
                                         "pg_replication_slots WHERE slot_name = '%s'", after, T.table);
    e2e_exec(T.conn, "DROP TABLE %s_other", T.table);
    cr_assert(moved, "the slot did not move past the other table's WAL (log %s)", r->log_path);
    /* The walsender's keepalives may move it first; the heartbeat comes
     * once nothing moved for its interval. */
    char *body = NULL;
    bool beat = false;
    for (int64_t end = e2e_now_ms() + 10000; !beat && e2e_now_ms() < end; e2e_sleep_ms(200)) {
        free(body);
        body = NULL;
        cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
        beat = strstr(body, "outbox_relay_slot_heartbeats_total") &&
               !strstr(body, "outbox_relay_slot_heartbeats_total 0\n");
    }
    cr_assert(beat, "no heartbeat counted:\n%.3000s", body);
    free(body);
}

/* A 200,000-row transaction goes through Kafka in several transactions of
 * bounded size: the relay's memory does not grow with it, and every row
 * arrives once, in order. */
Test(e2e, wal_large_transaction_in_bounded_memory, .fini = fini, .timeout = 300)
{
    setup("walbig");
    if (!T.env->real_kafka)
        cr_skip_test("librdkafka's mock broker keeps 5 MB a partition: it cannot hold the transaction");
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000), "log %s", r->log_path);
    write_rows(T.conn, "k", 1000, 1, 200000);
    cr_assert(e2e_wal_wait_confirmed(&T, 240000), "the slot was not confirmed past the transaction (log %s)",
              r->log_path);
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)r->pid);
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot read %s", path);
    long hwm_kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &hwm_kb) == 1)
            break;
    fclose(f);
    fprintf(stderr, "e2e: peak RSS %ld kB relaying one 200,000-row transaction\n", hwm_kb);
    /* The messages alone are over 60 MB: held at once, the peak would be far above this. */
    cr_assert(hwm_kb > 0 && hwm_kb < 60 * 1024, "peak RSS %ld kB", hwm_kb);
    read_back_once(200000);
}

/* SIGTERM in the middle of a backlog: the relay commits what Kafka took,
 * confirms it, and exits 0; the next relay goes on from there, so a clean
 * restart sends nothing twice. */
Test(e2e, wal_clean_restart_sends_nothing_twice, .fini = fini, .timeout = 200)
{
    setup("walterm");
    for (int k = 0; k < 50; k++)
        write_rows(T.conn, "k", 500, k * 1000 + 1, k * 1000 + 1000);
    const char *dbg[] = {"log.level=debug", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, dbg);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000), "log %s", r->log_path);
    e2e_sleep_ms(300);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0, "the relay did not exit 0 on SIGTERM (log %s)", r->log_path);
    r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_wal_wait_confirmed(&T, 120000), "the slot was not confirmed (log %s)", r->log_path);
    read_back_once(50000);
}
