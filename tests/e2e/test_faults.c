/* test_faults.c — the relay under faults of what it talks to: Kafka
 * unreachable, PostgreSQL restarted, rows that can never be produced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env)
        e2e_mock_command(&T, "up -1");
    e2e_teardown(&T);
}

static void enqueue_range(PGconn *c, int lo, int hi)
{
    e2e_exec(c,
        "SELECT count(%s('order', 'k' || (i %% 20), 'created', jsonb_build_object('i', i)))"
        "  FROM generate_series(%d, %d) AS i",
        T.qenqueue, lo, hi);
}

/* No row lost, every row marked, first deliveries in per-key order; redeliveries
 * are allowed (a fault can hide an acknowledgement). */
static void verify_at_least_once(const char *what)
{
    struct e2e_rows rows;
    e2e_rows_load(&T, &rows);
    size_t n_topics;
    char **topics = e2e_topics_of(&T, &rows, &n_topics);
    struct e2e_msgs msgs;
    e2e_consume((const char *const *)topics, n_topics, 120000, &msgs);
    struct e2e_report rep = {0};
    e2e_check(&rep, msgs.n_missing_topics == 0, "%zu topic(s) missing", msgs.n_missing_topics);
    e2e_verify(&T, &rows, &msgs, &rep);
    size_t dups = 0;
    for (size_t i = 0; i < rows.n; i++) {
        e2e_check(&rep, rows.v[i].deliveries >= 1, "row %lld lost", (long long)rows.v[i].id);
        e2e_check(&rep, rows.v[i].sent, "row %lld has sent_at NULL", (long long)rows.v[i].id);
        dups += rows.v[i].deliveries > 1;
    }
    fprintf(stderr, "e2e: %s: %zu messages for %zu rows, %zu rows duplicated\n", what, msgs.n, rows.n, dups);
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_topics_free(topics);
    e2e_rows_free(&rows);
}

Test(e2e, kafka_outage, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "kafkadown");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to take brokers down");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");
    enqueue_range(T.conn, 1, 1000);
    e2e_wait_all_sent(&T, 60000);

    /* All brokers down: new rows must not be marked, the relay must keep running. */
    cr_assert(e2e_mock_command(&T, "down -1"));
    e2e_sleep_ms(1000);
    enqueue_range(T.conn, 1001, 2000);
    e2e_sleep_ms(3000);
    long long marked = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL AND id > "
                                     "(SELECT min(id) + 999 FROM %s)", T.qtable, T.qtable);
    cr_assert_eq(marked, 0, "%lld rows were marked sent while every broker was down", marked);
    cr_assert(e2e_relay_alive(relay), "relay exited during the Kafka outage (log %s)", relay->log_path);

    cr_assert(e2e_mock_command(&T, "up -1"));
    e2e_wait_all_sent(&T, 90000);
    verify_at_least_once("Kafka outage");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

Test(e2e, postgres_restart, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "pgrestart");
    if (!T.env->stack_sh || !T.env->stack_dir)
        cr_skip_test("needs OUTBOX_RELAY_TEST_STACK_SH and _DIR to restart PostgreSQL");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.reconnect_interval_ms=200",
                           "relay.batch_size=200", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");
    enqueue_range(T.conn, 1, 5000);

    /* Restart while the relay works through the rows. */
    const char *args[] = {"/bin/bash", T.env->stack_sh, "pg_ctl", T.env->stack_dir, "restart", "-m", "fast", "-w",
                          "-t", "60", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(args, 90000, &out, &err);
    cr_assert_eq(rc, 0, "pg_ctl restart failed (%d): %s %s", rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
    PQreset(T.conn);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "cannot reconnect: %s", PQerrorMessage(T.conn));

    enqueue_range(T.conn, 5001, 6000);
    e2e_wait_all_sent(&T, 120000);
    cr_assert(e2e_relay_log_contains(relay, "msg=\"became leader\""), "no leader line");
    verify_at_least_once("PostgreSQL restart");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* Rows Kafka will never take (a header value that is not a string, an illegal
 * topic name) must not hold back the valid rows behind them, even when there
 * are more of them than one batch. */
Test(e2e, poison_rows_do_not_block_the_rest, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "poison");
    e2e_migrate(&T);
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'poison', 'created', '{}', jsonb_build_object('n', i)))"
        "  FROM generate_series(1, 6) AS i", T.qenqueue);
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'poison', 'created', '{}', NULL, 'not a topic!'))"
        "  FROM generate_series(1, 6) AS i", T.qenqueue);
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'fine-' || (i %% 4), 'created', jsonb_build_object('i', i)))"
        "  FROM generate_series(1, 50) AS i", T.qenqueue);

    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=5", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    bool ok = e2e_wait_sql(&T, 30000,
        "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE aggregate_id <> 'poison' AND sent_at IS NULL)", T.qtable);
    long long stuck = e2e_query_int(T.conn,
        "SELECT count(*) FROM %s WHERE aggregate_id <> 'poison' AND sent_at IS NULL", T.qtable);
    cr_assert(ok, "%lld of 50 valid rows are still unsent after 30 s behind 12 rows that cannot be "
              "produced (batch_size=5): the poison rows block the table", stuck);
    cr_assert(e2e_relay_alive(relay), "relay exited (log %s)", relay->log_path);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}
