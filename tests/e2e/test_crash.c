/* test_crash.c — the relay is SIGKILLed while it works through a backlog, then
 * started again: no row is lost, every row ends up marked, and only rows that
 * were still unmarked at the kill may appear twice in Kafka. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define BACKLOG 40000     /* inserted before the first relay starts */
#define AFTER 10000       /* inserted while no relay runs */
#define KILL_AT 2000      /* marked rows before the kill */
#define AGGREGATES 1000   /* many keys: even partitions (the mock keeps 5 MB each) */

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env) {
        e2e_mock_command(&T, "rtt -1 0");
        e2e_mock_command(&T, "clear Produce");
    }
    e2e_teardown(&T);
}

static void enqueue_range(int lo, int hi)
{
    e2e_exec(T.conn,
        "SELECT count(%s('order', 'a' || (i %% %d), 'created',"
        "   CASE WHEN i %% 97 = 0 THEN NULL ELSE jsonb_build_object('i', i) END))"
        "  FROM generate_series(%d, %d) AS i",
        T.qenqueue, AGGREGATES, lo, hi);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* @p outage: make every produce request fail (retriably) just before the kill,
 * so that the relay holds claimed rows that Kafka never stored: a relay that
 * marks rows before Kafka acknowledged them loses exactly those. */
static void crash_and_restart(const char *name, bool outage)
{
    e2e_setup(&T, name);
    if (outage && !T.env->mock_control)
        cr_skip_test("needs the mock broker to inject produce errors");
    e2e_migrate(&T);
    for (int lo = 1; lo <= BACKLOG; lo += 5000)
        enqueue_range(lo, lo + 4999);

    /* With the mock broker, slow acknowledgements down so that the kill lands
     * while a batch is in flight (produced, not yet acknowledged and marked). */
    bool slowed = e2e_mock_command(&T, "rtt -1 150");
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=500", NULL};
    struct e2e_relay *first = e2e_relay_start(&T, extra);

    /* Kill as soon as some rows are marked: the relay is in the middle of the backlog. */
    int64_t deadline = e2e_now_ms() + 120000;
    long long marked = 0;
    while (e2e_now_ms() < deadline) {
        marked = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable);
        if (marked >= KILL_AT)
            break;
        cr_assert(e2e_relay_alive(first), "relay exited before the kill (log %s)", first->log_path);
        e2e_sleep_ms(5);
    }
    cr_assert_geq(marked, KILL_AT, "only %lld rows marked after 120 s", marked);
    if (outage) {
        e2e_mock_command(&T, "errors Produce 20000 NOT_ENOUGH_REPLICAS");
        e2e_sleep_ms(1500); /* the batch in flight completes; the next one is stuck */
    }
    e2e_relay_kill(first);
    if (slowed)
        e2e_mock_command(&T, "rtt -1 0");
    if (outage)
        e2e_mock_command(&T, "clear Produce");

    /* What was marked at the kill; an UPDATE still running in a backend only
     * makes this set smaller, which loosens the duplicate check, never tightens it. */
    PGresult *res = e2e_query(T.conn, "SELECT id FROM %s WHERE sent_at IS NOT NULL ORDER BY id", T.qtable);
    size_t n_marked = (size_t)PQntuples(res);
    long long *marked_ids = malloc((n_marked + 1) * sizeof(*marked_ids));
    cr_assert(marked_ids);
    for (size_t i = 0; i < n_marked; i++)
        marked_ids[i] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
    PQclear(res);
    fprintf(stderr, "e2e: killed the relay with %zu of %d rows marked\n", n_marked, BACKLOG);
    cr_assert_lt(n_marked, (size_t)BACKLOG,
                 "the relay had marked the whole backlog before the kill: the test proves nothing");

    /* More rows while no relay runs, then a new relay. */
    for (int lo = BACKLOG + 1; lo <= BACKLOG + AFTER; lo += 5000)
        enqueue_range(lo, lo + 4999);
    struct e2e_relay *second = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 200000);
    (void)second;

    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    cr_assert_eq(rows.n, (size_t)(BACKLOG + AFTER));
    size_t lost = 0, dups = 0, bad_dups = 0;
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        long long id = r->id;
        bool was_marked = bsearch(&id, marked_ids, n_marked, sizeof(*marked_ids), cmp_ll) != NULL;
        if (r->deliveries == 0)
            lost++;
        if (r->deliveries > 1) {
            dups++;
            if (was_marked)
                bad_dups++;
        }
        e2e_check(&rep, r->deliveries >= 1, "row %lld lost: not in Kafka", id);
        e2e_check(&rep, r->deliveries <= 1 || !was_marked,
                  "row %lld was marked sent before the kill but was published %d times", id, r->deliveries);
        e2e_check(&rep, r->sent, "row %lld has sent_at NULL", id);
    }
    fprintf(stderr, "e2e: %zu messages for %zu rows: %zu lost, %zu duplicated (%zu of them marked at the kill)\n",
            msgs.n, rows.n, lost, dups, bad_dups);
    e2e_report_assert(&rep, outage ? "relay killed while produce requests failed, then restarted"
                                   : "relay killed mid-run and restarted");

    cr_assert_eq(e2e_relay_stop(second, 30000), 0, "restarted relay did not exit 0 on SIGTERM");
    free(marked_ids);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

Test(e2e, sigkill_mid_run_loses_nothing, .fini = fini, .timeout = 290)
{
    crash_and_restart("crash", false);
}

Test(e2e, sigkill_while_produce_fails_loses_nothing, .fini = fini, .timeout = 290)
{
    crash_and_restart("crashfail", true);
}

/* SIGTERM in the middle of a backlog: the relay drains what is in flight,
 * marks it, and exits 0 — so every row that reached Kafka is marked, and a
 * restart publishes nothing twice. */
Test(e2e, sigterm_drains_and_marks, .fini = fini, .timeout = 290)
{
    e2e_setup(&T, "drain");
    e2e_migrate(&T);
    enqueue_range(1, 20000);

    bool slowed = e2e_mock_command(&T, "rtt -1 100"); /* keep a batch in flight at the signal */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=500",
                           "relay.shutdown_timeout_ms=20000", NULL};
    struct e2e_relay *first = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 120000, "SELECT count(*) >= %d FROM %s WHERE sent_at IS NOT NULL", KILL_AT,
                           T.qtable), "rows were not being marked");
    int rc = e2e_relay_stop(first, 30000);
    if (slowed)
        e2e_mock_command(&T, "rtt -1 0");
    cr_assert_eq(rc, 0, "relay exited %d on SIGTERM (log %s)", rc, first->log_path);
    long long marked = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable);
    fprintf(stderr, "e2e: %lld of 20000 rows marked at shutdown\n", marked);
    cr_assert_lt(marked, 20000, "the backlog was finished before SIGTERM: the test proves nothing");

    /* What reached Kafka before the restart must all be marked. */
    struct e2e_rows rows;
    e2e_rows_load(&T, &rows);
    size_t n_topics;
    char **topics = e2e_topics_of(&T, &rows, &n_topics);
    struct e2e_msgs msgs;
    e2e_consume((const char *const *)topics, n_topics, 60000, &msgs);
    struct e2e_report rep = {0};
    e2e_verify(&T, &rows, &msgs, &rep);
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        e2e_check(&rep, r->deliveries <= 1, "row %lld published %d times", (long long)r->id, r->deliveries);
        e2e_check(&rep, r->deliveries == 0 || r->sent,
                  "row %lld reached Kafka but the relay exited without marking it", (long long)r->id);
        e2e_check(&rep, !r->sent || r->deliveries == 1, "row %lld is marked but not in Kafka", (long long)r->id);
    }
    e2e_report_assert(&rep, "state after SIGTERM");
    e2e_msgs_free(&msgs);

    /* A restart finishes the job without duplicates. */
    struct e2e_relay *second = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 120000);
    cr_assert_eq(e2e_relay_stop(second, 30000), 0, "second relay did not exit 0 on SIGTERM");
    e2e_rows_free(&rows);
    e2e_rows_load(&T, &rows);
    e2e_consume((const char *const *)topics, n_topics, 120000, &msgs);
    struct e2e_report rep2 = {0};
    e2e_verify(&T, &rows, &msgs, &rep2);
    for (size_t i = 0; i < rows.n; i++)
        e2e_check(&rep2, rows.v[i].deliveries == 1, "row %lld published %d times after the restart",
                  (long long)rows.v[i].id, rows.v[i].deliveries);
    e2e_report_assert(&rep2, "after a graceful stop and restart");
    e2e_msgs_free(&msgs);
    e2e_topics_free(topics);
    e2e_rows_free(&rows);
}
