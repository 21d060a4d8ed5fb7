/* test_blame.c — only the row at fault is charged, and a full producer queue
 * keeps per-aggregate order.
 *
 * A broker that rejects a whole produce request gives every message in it the
 * same error; the relay must not charge (nor dead-letter, nor hold behind) the
 * innocent rows that shared the request: they are produced again one at a
 * time and only a row that fails alone is charged. A producer queue that
 * fills in the middle of a batch must not let a later claim publish later
 * rows of the aggregates whose rows were left behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS 20000
#define AGGREGATES 40

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env) {
        e2e_mock_command(&T, "clear Produce");
        e2e_mock_command(&T, "rtt -1 0");
    }
    e2e_teardown(&T);
}

static void enqueue_range(int lo, int hi, int payload_bytes)
{
    e2e_enqueue_series(&T, "order", "a", AGGREGATES, "changed", lo, hi, payload_bytes);
}

/* Reads everything back; every row but @p guilty (0: none) delivered, marked,
 * charged nothing; order of first and last deliveries per aggregate. */
static void check_innocents(const char *what, long long guilty)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        if (r->id == guilty)
            continue;
        e2e_check(&rep, r->deliveries >= 1, "row %lld lost", (long long)r->id);
        e2e_check(&rep, r->sent, "row %lld not marked", (long long)r->id);
    }
    long long charged = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE attempts > 0 AND id <> %lld",
                                      T.qtable, guilty);
    long long dead = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE dead_at IS NOT NULL AND id <> %lld",
                                   T.qtable, guilty);
    e2e_check(&rep, charged == 0, "%lld innocent rows were charged an attempt", charged);
    e2e_check(&rep, dead == 0, "%lld innocent rows were dead-lettered", dead);
    fprintf(stderr, "%s: %zu rows, %zu messages, %lld innocent rows charged, %lld dead\n", what, rows.n,
            msgs.n, charged, dead);
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

static void request_error(const char *policy)
{
    e2e_setup(&T, policy[0] == 'd' ? "blamedl" : "blamehold");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker to fail a whole produce request");
    e2e_migrate(&T);
    for (int lo = 1; lo <= ROWS; lo += 5000)
        enqueue_range(lo, lo + 4999, 10);
    char pol[64];
    snprintf(pol, sizeof(pol), "relay.on_poison=%s", policy);
    const char *extra[] = {pol, "relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 60000, "SELECT count(*) >= 2000 FROM %s WHERE sent_at IS NOT NULL", T.qtable));
    /* One produce request rejected as a whole, as a broker does for a bad record batch. */
    cr_assert(e2e_mock_command(&T, "errors Produce 1 INVALID_RECORD"));
    e2e_wait_sql(&T, 180000, "SELECT count(*) = 0 FROM %s WHERE sent_at IS NULL AND dead_at IS NULL", T.qtable);
    check_innocents(policy, 0);
    cr_assert(e2e_relay_log_contains(r, "retrying the rows one at a time"),
              "the injected request error never reached the relay (log %s)", r->log_path);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

Test(e2e, request_error_dead_letters_no_innocent_row, .fini = fini, .timeout = 300)
{
    request_error("dead_letter");
}

Test(e2e, request_error_holds_no_innocent_row, .fini = fini, .timeout = 300)
{
    request_error("hold_aggregate");
}

/* A row the broker rejects (larger than the broker takes, though the producer
 * was allowed to send it) shares its produce request with innocent rows of
 * its partition: only it may be dead-lettered. */
Test(e2e, oversized_row_alone_is_charged, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "blamebig");
    if (!T.env->real_kafka)
        cr_skip_test("needs a real broker: the mock takes messages of any size");
    e2e_migrate(&T);
    enqueue_range(1, ROWS / 2, 10);
    /* Random hex, which lz4 does not shrink: the broker's limit is on the
     * compressed batch, and 1.5 MB of one letter would fit in it. */
    e2e_exec(T.conn, "SELECT %s('order', 'a1', 'changed', jsonb_build_object('pad', "
                     "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 47000))))",
             T.qenqueue);
    long long guilty = e2e_query_int(T.conn, "SELECT max(id) FROM %s", T.qtable);
    enqueue_range(ROWS / 2 + 1, ROWS, 10);
    const char *extra[] = {"relay.on_poison=dead_letter", "kafka.message.max.bytes=3000000",
                           "relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 180000, "SELECT count(*) = 0 FROM %s WHERE sent_at IS NULL AND dead_at IS NULL",
                           T.qtable), "rows left unsent (log %s)", r->log_path);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id = %lld AND dead_at IS NOT NULL "
                                       "AND attempts = 1", T.qtable, guilty), 1,
                 "the oversized row %lld was not dead-lettered after one attempt (log %s)", guilty, r->log_path);
    check_innocents("oversized row", guilty);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

/* The producer queue holds fewer bytes than a batch: every batch stops early
 * and the rest of it is claimed again; no aggregate's later row may overtake. */
Test(e2e, full_queue_keeps_order, .fini = fini, .timeout = 400)
{
    e2e_setup(&T, "queuefull");
    e2e_migrate(&T);
    for (int lo = 1; lo <= ROWS; lo += 5000)
        enqueue_range(lo, lo + 4999, 500);
    bool slowed = e2e_mock_command(&T, "rtt -1 30");
    const char *extra[] = {"relay.batch_size=1000", "kafka.queue.buffering.max.kbytes=200",
                           "relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 300000);
    if (slowed)
        e2e_mock_command(&T, "rtt -1 0");
    cr_assert(e2e_relay_log_contains(r, "producer cannot take more now"),
              "the producer queue never filled: the test proves nothing (log %s)", r->log_path);
    check_innocents("full producer queue", 0);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

/* Batches in flight that an operator-sized queue cannot hold are refused at
 * start, naming both keys; left unset, the queue is sized for them. */
static int check_config(const char *batch, const char *queue, char **err)
{
    const char *argv[E2E_MAX_ARGS];
    int n = 0;
    argv[n++] = "check-config";
    e2e_base_args(&T, argv, &n);
    argv[n++] = "-X";
    argv[n++] = batch;
    if (queue) {
        argv[n++] = "-X";
        argv[n++] = queue;
    }
    argv[n] = NULL;
    return e2e_run_relay(argv, 30000, NULL, err);
}

Test(e2e, batch_larger_than_queue_rejected, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "queuecfg");
    char *err = NULL;
    int rc = check_config("relay.batch_size=1000", "kafka.queue.buffering.max.messages=1500", &err);
    cr_assert_eq(rc, 78, "batch_size 1000 with a 1,500-message queue: exit %d\n%s", rc, err ? err : "");
    cr_assert(err && strstr(err, "relay.batch_size=1000") && strstr(err, "queue.buffering.max.messages is 1500"),
              "the error does not name the keys: %s", err ? err : "");
    free(err);
    err = NULL;
    rc = check_config("relay.batch_size=60000", NULL, &err);
    cr_assert_eq(rc, 0, "batch_size 60000 with the queue left to the relay: exit %d\n%s", rc, err ? err : "");
    free(err);
}
