/* test_commit_order.c — ids are handed out at INSERT, rows become visible at
 * COMMIT: a relay that remembers "the highest id I have seen" loses rows whose
 * transaction commits late. Every such row must still arrive. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define CONNS 20
#define ROUNDS 5

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* Enqueues one row on @p c and returns its id (the function's INSERT is not
 * visible to the statement that calls it, hence two statements). */
static long long enqueue_one(PGconn *c, const char *aggregate_id, const char *payload)
{
    PGresult *res = e2e_query(c, "SELECT %s('order', '%s', 'created', '%s')", T.qenqueue, aggregate_id, payload);
    char event_id[64];
    snprintf(event_id, sizeof(event_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return e2e_query_int(c, "SELECT id FROM %s WHERE event_id = '%s'", T.qtable, event_id);
}

static void verify_all_once(const char *what)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        e2e_check(&rep, r->deliveries == 1, "row %lld (%s/%s) delivered %d times, expected once",
                  (long long)r->id, r->aggregate_id, r->event_type, r->deliveries);
        e2e_check(&rep, r->sent, "row %lld has sent_at NULL", (long long)r->id);
    }
    e2e_check(&rep, msgs.n == rows.n, "%zu messages for %zu rows", msgs.n, rows.n);
    e2e_report_assert(&rep, what);

    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

/* 20 transactions take ids in order, then commit newest first. */
Test(e2e, commit_in_reverse_id_order, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "revcommit");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=20", "relay.batch_size=5", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");

    PGconn *c[CONNS];
    for (int i = 0; i < CONNS; i++)
        c[i] = e2e_pg_connect();

    for (int round = 0; round < ROUNDS; round++) {
        long long ids[CONNS];
        for (int i = 0; i < CONNS; i++) {
            e2e_exec(c[i], "BEGIN");
            char agg[32], payload[64];
            snprintf(agg, sizeof(agg), "r%d-c%02d", round, i);
            snprintf(payload, sizeof(payload), "{\"round\": %d, \"conn\": %d}", round, i);
            ids[i] = enqueue_one(c[i], agg, payload);
        }
        for (int i = 1; i < CONNS; i++)
            cr_assert_gt(ids[i], ids[i - 1], "ids are not handed out in insert order");
        /* Newest first, giving the relay time to see (and move past) each one. */
        for (int i = CONNS - 1; i >= 0; i--) {
            e2e_exec(c[i], "COMMIT");
            e2e_sleep_ms(30);
        }
    }
    for (int i = 0; i < CONNS; i++)
        PQfinish(c[i]);

    e2e_wait_all_sent(&T, 60000);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable), CONNS * ROUNDS);
    verify_all_once("rows committed in reverse id order");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A low id stays invisible while higher ids are relayed and marked; it commits
 * afterwards and must still be relayed. */
Test(e2e, late_commit_of_low_id, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "latecommit");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=50", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "relay did not become leader");

    PGconn *slow = e2e_pg_connect();
    e2e_exec(slow, "BEGIN");
    long long low = enqueue_one(slow, "slow", "{\"late\": true}");

    /* 100 rows with higher ids, committed one by one, relayed and marked. */
    for (int i = 0; i < 100; i++)
        e2e_exec(T.conn, "SELECT %s('order', 'fast-%d', 'created', jsonb_build_object('i', %d))",
                 T.qenqueue, i % 10, i);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id < %lld", T.qtable, low), 0,
                 "the slow transaction's id is not the lowest");
    e2e_wait_all_sent(&T, 60000); /* the slow row is not visible to this connection yet */
    e2e_sleep_ms(1000);           /* several poll rounds past the gap */

    e2e_exec(slow, "COMMIT");
    PQfinish(slow);

    bool ok = e2e_wait_sql(&T, 30000, "SELECT sent_at IS NOT NULL FROM %s WHERE id = %lld", T.qtable, low);
    cr_assert(ok, "row %lld, committed after higher ids were relayed, was never sent (sent_at NULL after 30 s)",
              low);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable), 101);
    verify_all_once("a low id committed late");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A row that commits inside the id range of a batch still with Kafka, after
 * that batch was claimed, is in no batch. A later row of its aggregate,
 * written after it committed, gets an id above the range: it must not be
 * published first. The mock's round trip holds the batch with Kafka. */
Test(e2e, a_late_row_inside_a_batch_in_flight_keeps_its_aggregate_order, .fini = fini,
     .timeout = 200)
{
    e2e_setup(&T, "gap");
    if (!T.env->mock_control)
        cr_skip_test("needs the mock broker's round-trip control");
    e2e_migrate(&T);
    const char *extra[] = {"relay.poll_interval_ms=50", "log.level=debug", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "no leader");
    enqueue_one(T.conn, "warm-up", "{}");
    e2e_wait_all_sent(&T, 30000);

    cr_assert(e2e_mock_command(&T, "rtt -1 1500"), "mock: rtt");
    PGconn *y = e2e_pg_connect(), *x = e2e_pg_connect();
    e2e_exec(y, "BEGIN");
    long long k = enqueue_one(y, "other-1", "{}");
    e2e_exec(x, "BEGIN");
    long long late = enqueue_one(x, "the-aggregate", "{\"n\": 1}");
    long long k2 = enqueue_one(y, "other-2", "{}");
    e2e_exec(y, "COMMIT");
    cr_assert(k < late && late < k2, "ids %lld %lld %lld not in insert order", k, late, k2);
    /* The relay claims k and k2: a batch whose range holds the open row. */
    cr_assert(e2e_relay_wait_log(relay, "msg=\"claimed\" batch=0 rows=2", 10000) ||
                  e2e_relay_wait_log(relay, "msg=\"claimed\" batch=1 rows=2", 100),
              "the batch of rows %lld and %lld was not claimed (log %s)", k, k2, relay->log_path);
    e2e_exec(x, "COMMIT");
    long long next = enqueue_one(x, "the-aggregate", "{\"n\": 2}");
    cr_assert_gt(next, k2);
    /* The late row is claimed while the batch is still with Kafka, by its
     * id, a gap of the skipped range (the later row, above the range, with
     * it or after it: in id order either way). */
    int found = 0;
    for (int i = 0; i < 100 && found < 3; i++) {
        e2e_sleep_ms(10);
        found = e2e_relay_log_count(relay, "msg=\"claimed\"") -
                e2e_relay_log_count(relay, " rows=0 ");
    }
    cr_assert(e2e_mock_command(&T, "rtt -1 0"), "mock: rtt 0");
    cr_assert_geq(found, 3, "row %lld was not claimed while the batch of %lld and %lld was with "
                  "Kafka (log %s)", late, k, k2, relay->log_path);

    e2e_wait_all_sent(&T, 60000);
    PQfinish(x);
    PQfinish(y);
    verify_all_once("a row committed inside the range of a batch in flight");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}
