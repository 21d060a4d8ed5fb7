/* test_delivery.c — 10,000 rows over 100 aggregates, relayed by one relay that
 * is never restarted: each row arrives exactly once with the right topic, key,
 * value (tombstones included), CreateTime timestamp and headers, per-key order
 * holds, a row's own topic wins over the template, and every row is marked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS 10000
#define BATCH 1000
#define AGGREGATES 100

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* Rows i = lo..hi through the enqueue function, one transaction:
 *  aggregate agg-<i % 100>, type order (aggregates 0..59) or customer;
 *  every 37th a tombstone, every 5th with a headers object, every 101st
 *  with its own topic. */
static void enqueue_range(int lo, int hi)
{
    e2e_exec(T.conn,
        "SELECT count(%s("
        "   CASE WHEN i %% %d < 60 THEN 'order' ELSE 'customer' END,"
        "   'agg-' || lpad((i %% %d)::text, 3, '0'),"
        "   (ARRAY['created', 'updated', 'shipped'])[1 + i %% 3],"
        "   CASE WHEN i %% 37 = 0 THEN NULL"
        "        ELSE jsonb_build_object('seq', i, 'note', 'größe ' || repeat('x', i %% 13),"
        "                                'items', jsonb_build_array(i %% 7, 'a\"b', true, NULL)) END,"
        "   CASE WHEN i %% 5 = 0 THEN jsonb_build_object('trace_id', 'tr-' || i, 'tenant', 't' || (i %% 3))"
        "        ELSE NULL END,"
        "   CASE WHEN i %% 101 = 0 THEN '%s.special' ELSE NULL END))"
        "  FROM generate_series(%d, %d) AS i",
        T.qenqueue, AGGREGATES, AGGREGATES, T.table, lo, hi);
}

Test(e2e, delivery_10k_rows, .fini = fini, .timeout = 280)
{
    e2e_setup(&T, "delivery");
    e2e_migrate(&T);

    const char *extra[] = {"relay.poll_interval_ms=200", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000),
              "relay did not log became leader within 30 s (log %s)", relay->log_path);

    /* Inserted while the relay runs, in separate transactions. */
    for (int lo = 1; lo <= ROWS; lo += BATCH)
        enqueue_range(lo, lo + BATCH - 1);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable), ROWS);

    e2e_wait_all_sent(&T, 180000);

    struct e2e_rows rows;
    e2e_rows_load(&T, &rows);
    cr_assert_eq(rows.n, (size_t)ROWS);

    size_t n_topics;
    char **topics = e2e_topics_of(&T, &rows, &n_topics);
    cr_assert_eq(n_topics, 3, "expected rows for 3 topics (order, customer, special), got %zu", n_topics);

    struct e2e_msgs msgs;
    e2e_consume((const char *const *)topics, n_topics, 120000, &msgs);
    cr_assert_eq(msgs.n_missing_topics, 0, "some topics do not exist");

    struct e2e_report rep = {0};
    e2e_verify(&T, &rows, &msgs, &rep);

    size_t tombstones = 0, with_headers = 0, special = 0;
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        e2e_check(&rep, r->deliveries == 1, "row %lld (event_id %s) delivered %d times, expected once",
                  (long long)r->id, r->event_id, r->deliveries);
        e2e_check(&rep, r->sent, "row %lld has sent_at NULL", (long long)r->id);
        tombstones += r->payload == NULL;
        with_headers += r->custom_headers != NULL;
        special += r->topic != NULL;
    }
    e2e_check(&rep, msgs.n == ROWS, "%zu messages in Kafka, expected %d", msgs.n, ROWS);
    /* The data set covers what it claims to. */
    e2e_check(&rep, tombstones == ROWS / 37, "%zu tombstone rows", tombstones);
    e2e_check(&rep, with_headers == ROWS / 5, "%zu rows with headers", with_headers);
    e2e_check(&rep, special == ROWS / 101, "%zu rows with their own topic", special);
    e2e_report_assert(&rep, "delivery of 10,000 rows");

    /* The relay drains and exits 0 on SIGTERM. */
    int rc = e2e_relay_stop(relay, 30000);
    cr_assert_eq(rc, 0, "relay exited %d on SIGTERM (log %s)", rc, relay->log_path);

    e2e_msgs_free(&msgs);
    e2e_topics_free(topics);
    e2e_rows_free(&rows);
}
