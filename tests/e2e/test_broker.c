/* test_broker.c — the relay against a real Kafka broker that fails the way
 * brokers do: killed (SIGKILL) and restarted, hung (SIGSTOP: connections open,
 * no answers) and resumed. Faults of a three-node cluster (a partition
 * leader, the coordinator, the controller killed, ...) are the fault matrix's
 * (tests/fault-matrix): three JVMs are more than CI's two cores can spare.
 *
 * Through each, a consumer checks every row: none lost, none duplicated (the
 * idempotent producer dedupes the retries the broker did persist), first and
 * last deliveries of every aggregate in id order, every row marked.
 * A broker hung for longer than relay.ack_timeout_ms makes /readyz fail on its
 * acks check. These faults exist only on a real broker: the tests skip on the
 * mock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS 20000        /* backlog before the fault */
#define DURING 5000       /* written while the broker is down or hung */
#define AGGREGATES 40
#define FAULT_AT 2000     /* rows marked before the fault */

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env) {
        e2e_kafka_node(&T, "resume", 1);
        e2e_kafka_node(&T, "restart", 1);
    }
    e2e_teardown(&T);
}

static void enqueue_range(int lo, int hi)
{
    e2e_enqueue_series(&T, "order", "a", AGGREGATES, "changed", lo, hi, 0);
}

static struct e2e_relay *start_and_drain_a_little(void)
{
    for (int lo = 1; lo <= ROWS; lo += 5000)
        enqueue_range(lo, lo + 4999);
    /* Small batches: many produce requests, so the fault lands mid-stream. */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 120000, "SELECT count(*) >= %d FROM %s WHERE sent_at IS NOT NULL", FAULT_AT,
                           T.qtable),
              "fewer than %d rows sent within 120 s (log %s)", FAULT_AT, r->log_path);
    return r;
}

static void check_everything(const char *what, struct e2e_relay *r)
{
    e2e_wait_all_sent(&T, 240000);
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    cr_assert_eq(rows.n, (size_t)(ROWS + DURING));
    size_t dup = 0;
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *row = &rows.v[i];
        e2e_check(&rep, row->deliveries >= 1, "row %lld (%s) lost", (long long)row->id, row->event_id);
        e2e_check(&rep, row->sent, "row %lld not marked", (long long)row->id);
        if (row->deliveries > 1)
            dup++;
    }
    e2e_check(&rep, dup == 0, "%zu rows delivered more than once although the relay never restarted", dup);
    fprintf(stderr, "%s: %zu rows, %zu messages, %zu duplicated\n", what, rows.n, msgs.n, dup);
    e2e_report_assert(&rep, what);
    int status = 0;
    char *body = NULL;
    for (int i = 0; i < 30 && status != 200; i++) {
        free(body);
        if (i)
            e2e_sleep_ms(500);
        status = e2e_relay_http_get(r, "/readyz?verbose", &body);
    }
    cr_assert_eq(status, 200, "/readyz still %d after the broker recovered:\n%s", status, body);
    free(body);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0, "the relay did not exit 0 on SIGTERM");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

static long long count_sent(void)
{
    return e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable);
}

/* The stack's only Kafka node gets @p fault (kill, pause) while rows keep
 * coming; after @p settle_ms nothing more may be marked for @p hold_ms, then
 * @p recover (restart, resume) brings it back and every row must arrive.
 * A hold longer than relay.ack_timeout_ms (10 s) must show in readiness. */
static void single_node_fault(const char *name, const char *fault, const char *recover, int settle_ms,
                              int hold_ms, const char *what)
{
    e2e_setup(&T, name);
    if (!T.env->kafka_dir)
        cr_skip_test("needs the stack's own Kafka broker (OUTBOX_RELAY_TEST_KAFKA_DIR) for faults");
    e2e_migrate(&T);
    struct e2e_relay *r = start_and_drain_a_little();

    e2e_kafka_node(&T, fault, 1);
    enqueue_range(ROWS + 1, ROWS + DURING);
    e2e_sleep_ms(settle_ms);
    long long sent = count_sent();
    e2e_sleep_ms(hold_ms);
    cr_assert_eq(count_sent(), sent, "rows were marked sent while the only broker was down (%s)", fault);
    char *body = NULL;
    if (settle_ms + hold_ms > 11000) {
        int status = e2e_relay_http_get(r, "/readyz?verbose", &body);
        cr_assert(status == 503 && strstr(body, "[-]acks"),
                  "/readyz answered %d without a failing acks check %.0f s into the fault:\n%s", status,
                  (settle_ms + hold_ms) / 1000.0, body);
        free(body);
    }
    e2e_kafka_node(&T, recover, 1);
    check_everything(what, r);
}

Test(e2e, broker_killed_and_restarted, .fini = fini, .timeout = 500)
{
    single_node_fault("brokerkill", "kill", "restart", 3000, 2000, "broker killed and restarted");
}

Test(e2e, broker_hung_and_resumed, .fini = fini, .timeout = 500)
{
    single_node_fault("brokerhang", "pause", "resume", 1000, 11000, "broker hung 12 s and resumed");
}
