/* test_retention.c — what happens to rows after Kafka acknowledged them:
 * relay.retention deletes old sent rows in bounded batches and never an
 * unsent or dead one; relay.on_sent=delete removes each row only after its
 * acknowledgement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

/* relay.c runs retention at most once a minute (RETENTION_EVERY_MS), the
 * first time a minute after start: the test has to wait that long. */
#define RETENTION_FIRST_PASS_MS 60000
#define RETENTION_BATCH 1000
#define SENT_ROWS 2500

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env)
        e2e_mock_command(&T, "up -1");
    e2e_teardown(&T);
}

Test(e2e, retention_deletes_only_old_sent_rows_in_batches, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "retention");
    e2e_migrate(&T);
    /* A dead row (larger than message.max.bytes) with two rows held behind it
     * (hold_aggregate, the default): unsent and dead rows that must survive. */
    long long dead = e2e_query_int(T.conn,
        "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload) VALUES "
        "('order', 'held', 'created', jsonb_build_object('blob', repeat('x', 20000))) RETURNING id", T.qtable);
    e2e_exec(T.conn, "SELECT count(%s('order', 'held', 'created', jsonb_build_object('n', i))) "
             "FROM generate_series(1, 2) AS i", T.qenqueue);
    e2e_exec(T.conn, "SELECT count(%s('order', 'k' || (i %% 50), 'created', jsonb_build_object('n', i))) "
             "FROM generate_series(1, %d) AS i", T.qenqueue, SENT_ROWS);

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.retention=1s", "kafka.message.max.bytes=10000",
                           "log.level=debug", NULL};
    int64_t started = e2e_now_ms();
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT count(*) = %d FROM %s WHERE sent_at IS NOT NULL", SENT_ROWS, T.qtable),
              "the healthy rows were not sent");
    /* Its failure record is written after the healthy rows' marks. */
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT count(*) = 1 FROM %s WHERE id = %lld AND dead_at IS NOT NULL",
                           T.qtable, dead),
              "the oversized row is not dead");

    /* Before the first pass nothing is deleted, although every sent row is
     * older than the retention of one second. */
    e2e_sleep_ms(2000);
    if (e2e_now_ms() - started < RETENTION_FIRST_PASS_MS - 5000)
        cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable), SENT_ROWS + 3,
                     "rows were deleted before the first retention pass");

    bool gone = e2e_wait_sql(&T, RETENTION_FIRST_PASS_MS + 30000,
                             "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NOT NULL)", T.qtable);
    fprintf(stderr, "e2e: retention: sent rows gone after %lld ms\n", (long long)(e2e_now_ms() - started));
    cr_assert(gone, "%lld sent rows older than relay.retention=1s are still there %d s after start",
              e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable),
              (RETENTION_FIRST_PASS_MS + 30000) / 1000);

    struct e2e_report rep = {0};
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable) == 3,
              "%lld rows left, expected the dead row and the two held behind it",
              e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable));
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id = %lld AND dead_at IS NOT NULL",
                                  T.qtable, dead) == 1, "the dead row was deleted");
    /* In batches of at most RETENTION_BATCH: 1000 + 1000 + 500. */
    char *log = e2e_relay_log(relay);
    int batches = 0, full = 0;
    long total = 0;
    static const char needle[] = "msg=\"retention deleted sent rows\" rows=";
    for (const char *p = log; (p = strstr(p, needle)) != NULL; p++) {
        long n = strtol(p + strlen(needle), NULL, 10);
        batches++;
        total += n;
        full += n == RETENTION_BATCH;
        e2e_check(&rep, n > 0 && n <= RETENTION_BATCH, "a retention batch deleted %ld rows", n);
    }
    free(log);
    e2e_check(&rep, total == SENT_ROWS && batches == 3 && full == 2,
              "retention logged %d batches (%d full) deleting %ld rows; expected 1000 + 1000 + 500", batches,
              full, total);
    e2e_report_assert(&rep, "retention");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* on_sent=delete: a row disappears only once Kafka has it; while the broker
 * is down nothing is deleted. The rows are read before the relay runs, since
 * afterwards the table is empty. */
Test(e2e, on_sent_delete_only_after_ack, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "onsentdel");
    e2e_migrate(&T);
    e2e_exec(T.conn, "SELECT count(%s('order', 'k' || (i %% 20), 'created', jsonb_build_object('n', i))) "
             "FROM generate_series(1, 1000) AS i", T.qenqueue);
    struct e2e_rows before;
    e2e_rows_load(&T, &before);

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.on_sent=delete", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 60000, "SELECT NOT EXISTS (SELECT 1 FROM %s)", T.qtable),
              "%lld rows still in the table", e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable));

    struct e2e_rows during = {0};
    if (T.env->mock_control) {
        /* Brokers down: new rows stay, however long we wait. */
        cr_assert(e2e_mock_command(&T, "down -1"));
        e2e_sleep_ms(500);
        e2e_exec(T.conn, "SELECT count(%s('order', 'k' || (i %% 20), 'created', jsonb_build_object('n', i))) "
                 "FROM generate_series(1001, 1500) AS i", T.qenqueue);
        e2e_rows_load(&T, &during);
        e2e_sleep_ms(4000);
        long long left = e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable);
        cr_assert_eq(left, 500, "%lld of 500 rows left while every broker is down: rows were deleted without "
                     "an acknowledgement", left);
        cr_assert(e2e_mock_command(&T, "up -1"));
        cr_assert(e2e_wait_sql(&T, 90000, "SELECT NOT EXISTS (SELECT 1 FROM %s)", T.qtable),
                  "rows not deleted after the brokers came back");
    }

    /* Every row that was deleted is in Kafka, exactly once (no fault hid an ack). */
    struct e2e_rows all = {0};
    all.v = calloc(before.n + during.n + 1, sizeof(*all.v));
    cr_assert(all.v);
    for (size_t i = 0; i < before.n; i++)
        all.v[all.n++] = before.v[i];
    for (size_t i = 0; i < during.n; i++)
        all.v[all.n++] = during.v[i];
    size_t n_topics;
    char **topics = e2e_topics_of(&T, &all, &n_topics);
    struct e2e_msgs msgs;
    e2e_consume((const char *const *)topics, n_topics, 60000, &msgs);
    struct e2e_report rep = {0};
    e2e_verify(&T, &all, &msgs, &rep);
    for (size_t i = 0; i < all.n; i++)
        e2e_check(&rep, all.v[i].deliveries == 1, "row %lld deleted but delivered %d times",
                  (long long)all.v[i].id, all.v[i].deliveries);
    e2e_check(&rep, msgs.n == all.n, "%zu messages for %zu rows", msgs.n, all.n);
    e2e_report_assert(&rep, "on_sent=delete");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    e2e_msgs_free(&msgs);
    e2e_topics_free(topics);
    free(all.v);
    e2e_rows_free(&before);
    e2e_rows_free(&during);
}
