/* test_failover_ops.c — failovers as operators live them, against a primary
 * and its synchronous standby of the test's own (tests/support/pg_pair.sh):
 * a planned switchover under writers (the old primary rejoining as a
 * standby), polled and log-based; two relays on one two-host conninfo across
 * a failover; the old primary coming back writable after the promotion
 * (split brain). What is checked is what an operator checks: every row in
 * Kafka, per-aggregate order, duplicates only of rows in flight at the
 * switch (or, log-based, read while the recovery ran), with their event's
 * id, which relay leads, the slot, and what /status and /metrics say about
 * the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS_BEFORE 1000       /* committed on the primary before the switch */
#define ROWS_AFTER 1000        /* committed on the promoted server after */
#define BATCH 200              /* relay.batch_size */
/* Rows between their claim and their mark at most: with Kafka transactions
 * and a backlog the relay keeps three batches (RELAY_BATCH_SLOTS), two in
 * flight and one produced into the next transaction while the marks of the
 * one before are written. All three can be in Kafka and unmarked when the
 * primary stops (seen on a real broker: 600 rows). */
#define IN_FLIGHT_MAX (3 * BATCH)

static struct e2e_ctx T;
static struct e2e_pg_pair P;
static struct e2e_writers *writers;

static void fini(void)
{
    e2e_writers_free(writers);
    writers = NULL;
    e2e_teardown(&T);
    e2e_pg_pair_stop(&P);
}

/* The pair with the table migrated on its primary (e2e_pg_pair_up). */
static void pair_up(void)
{
    e2e_pg_pair_up(&T, &P);
    e2e_migrate(&T);
}

/* ---- what the relay says: /metrics and /status --------------------------- */

/* The value of an unlabelled metric, or -1 when the relay does not export it. */
static double metric(struct e2e_relay *r, const char *name)
{
    char *body = NULL;
    if (e2e_relay_http_get(r, "/metrics", &body) != 200) {
        free(body);
        return -1;
    }
    char needle[160];
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *at = body ? strstr(body, needle) : NULL;
    double v = at ? strtod(at + strlen(needle), NULL) : -1;
    free(body);
    return v;
}

/* Waits up to @p timeout_ms for @p name to read @p want. */
static bool metric_is(struct e2e_relay *r, const char *name, double want, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    do {
        if (metric(r, name) == want)
            return true;
        e2e_sleep_ms(100);
    } while (e2e_now_ms() < deadline);
    return false;
}

/* /status's postgres.server. */
struct server_seen {
    int port;
    int timeline;
    int failovers;
    int reconnects;
    char system_id[32];
};

static struct server_seen server_of(struct e2e_relay *r)
{
    struct server_seen s = {0};
    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/status", &body), 200);
    cJSON *root = cJSON_Parse(body);
    cr_assert_not_null(root, "/status is not JSON: %s", body);
    cJSON *sv = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "postgres"), "server");
    cr_assert_not_null(sv, "/status has no postgres.server: %s", body);
    const char *port = cJSON_GetStringValue(cJSON_GetObjectItem(sv, "port"));
    const char *sys = cJSON_GetStringValue(cJSON_GetObjectItem(sv, "system_identifier"));
    s.port = port ? atoi(port) : 0;
    snprintf(s.system_id, sizeof s.system_id, "%s", sys ? sys : "");
    s.timeline = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(sv, "timeline"));
    s.failovers = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(sv, "failovers_total"));
    s.reconnects = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(sv, "reconnect_attempts_total"));
    cJSON_Delete(root);
    free(body);
    return s;
}

/* Waits until /status shows the relay on @p port on @p timeline. */
static struct server_seen wait_server(struct e2e_relay *r, int port, int timeline, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    struct server_seen s;
    do {
        s = server_of(r);
        if (s.port == port && s.timeline == timeline)
            return s;
        e2e_sleep_ms(100);
    } while (e2e_now_ms() < deadline);
    cr_assert_fail("/status shows port %d timeline %d, not port %d timeline %d (log %s)", s.port,
                   s.timeline, port, timeline, r->log_path);
    return s;
}

/* ---- what Kafka holds ------------------------------------------------------ */

/* Every row of the table T.conn reaches is in Kafka and marked (when polled), the first
 * deliveries of each aggregate in order (e2e_verify); a row delivered more
 * than once was created before @p switch_us, when the old primary was down
 * (in flight at the switch: published, not yet marked), and at most
 * @p max_dups rows are. @return how many rows came twice. */
static size_t check_delivered(const char *what, int64_t switch_us, size_t max_dups)
{
    struct e2e_dups dups = {.until_us = switch_us, .max = max_dups};
    return e2e_check_delivered_dups(&T, what, !T.wal, dups);
}

/* ---- a planned switchover ------------------------------------------------ */

/* The server the relay reports before the switch: the primary, timeline 1. */
static struct server_seen first_server(struct e2e_relay *r)
{
    struct server_seen before = wait_server(r, P.primary_port, 1, 20000);
    cr_assert_eq(before.failovers, 0);
    cr_assert_neq(before.system_id[0], '\0', "no system identifier in /status");
    return before;
}

/* Fast stop of the primary (its WAL all on the standby) under writers, the
 * standby promoted, the old primary back as a standby of it: the conninfo's
 * first host is now a standby, which target_session_attrs=read-write passes
 * over. Returns once the writers committed ROWS_AFTER rows more on the
 * promoted server and stopped, every commit they were answered in its table. */
static struct e2e_failover switchover(void)
{
    writers = e2e_writers_start(&T, ROWS_BEFORE, NULL);
    /* Every row created after f.stopped_us is the promoted server's. */
    struct e2e_failover f = e2e_pg_pair_failover(&T, &P, true, writers);
    e2e_pg_pair_rejoin(&P);
    fprintf(stderr, "e2e: the old primary streams from the new one\n");
    e2e_writers_wait(writers, f.committed_at_stop + ROWS_AFTER, NULL);
    long total = e2e_writers_stop(writers);
    cr_assert_geq(e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable), total,
                  "commits the writers were answered are missing on the promoted server");
    return f;
}

/* What an operator reads once the relay is on the promoted server: /status
 * and /metrics name it (timeline 2 of the same system, one failover seen),
 * `outbox-relay status` says it in one line, the log says why. */
static void assert_switched(struct e2e_relay *r, const struct server_seen *before)
{
    struct server_seen after = wait_server(r, P.standby_port, 2, 10000);
    cr_assert_str_eq(after.system_id, before->system_id, "another system after a switchover");
    cr_assert_eq(after.failovers, 1, "/status counts %d failovers", after.failovers);
    cr_assert_geq(after.reconnects, 2, "/status counts %d connects", after.reconnects);
    cr_assert_eq(metric(r, "outbox_relay_postgres_failovers_total"), 1);
    cr_assert_eq(metric(r, "outbox_relay_postgres_timeline"), 2);
    cr_assert_eq(metric(r, "outbox_relay_postgres_disconnected_seconds"), 0);
    cr_assert_eq(metric(r, "outbox_relay_leader"), 1);
    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    char info[200];
    snprintf(info, sizeof info, "outbox_relay_postgres_server_info{host=\"127.0.0.1\",port=\"%d\","
             "system_identifier=\"%s\"} 1\n", P.standby_port, before->system_id);
    cr_assert(strstr(body, info), "no %s in /metrics", info);
    free(body);
    char url[64], want[160];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", e2e_relay_http_port(r, 5000));
    const char *status[] = {"status", "--url", url, NULL};
    char *out = NULL, *err = NULL;
    cr_assert_eq(e2e_run_relay(status, 10000, &out, &err), 0, "status: %s", err ? err : "");
    snprintf(want, sizeof want, "postgres    up on 127.0.0.1:%d, timeline 2 (1 failover seen)\n",
             P.standby_port);
    cr_assert(out && strstr(out, want), "`outbox-relay status` does not say \"%s\":\n%s", want, out);
    free(out);
    free(err);
    cr_assert(e2e_relay_log_contains(r, "msg=\"postgres failover: the server is on a later timeline\""),
              "no line says the failover (log %s)", r->log_path);
}

/* Polling: nothing may be lost, and only rows in flight at the switch
 * (produced, not yet marked) may come twice. */
Test(e2e, switchover_under_writers_polling, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "switchover");
    pair_up();
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    struct server_seen before = first_server(r);
    struct e2e_failover f = switchover();
    e2e_wait_all_sent(&T, 60000);
    fprintf(stderr, "e2e: every row marked %lld ms after the promotion\n",
            (long long)(e2e_now_ms() - f.promoted_ms));
    assert_switched(r, &before);
    check_delivered("switchover", f.stopped_us, IN_FLIGHT_MAX);
}

/* relay.capture = wal on a server without failover slots: the promoted
 * server has no slot, and relay.slot_recovery = reconcile makes one there,
 * publishes the rows Kafka lacks, then streams. Every row in Kafka, each
 * aggregate in order; the slot on the promoted server, streamed from;
 * /readyz ready again and the recovery counted besides what polling shows.
 * A row may come twice only as e2e_verify checks every message: with its
 * row's event_id (the id a consumer deduplicates on), and only a row
 * committed while the old primary stopped (in flight at the switch): what
 * was relayed before is not sent again, and the recovery reads the table in
 * the snapshot the new slot exported, so none of the promoted server's rows
 * is both published from the table and streamed. */
Test(e2e, switchover_under_writers_wal, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "switchwal");
    e2e_wal_enable(&T);
    pair_up();
    /* No logical messages: the table holds every event, so the gap can be proven closed. */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200",
                           "relay.slot_recovery=reconcile", "relay.message_prefix=", NULL};
    struct e2e_relay *r = e2e_relay_start_capturing(&T, extra, 20000);
    struct server_seen before = first_server(r);
    struct e2e_failover f = switchover();
    cr_assert(e2e_relay_wait_log(r, "postgres failover reconciled", 60000),
              "the relay did not close the gap (log %s)", r->log_path);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the new slot was not confirmed (log %s)",
              r->log_path);
    fprintf(stderr, "e2e: every row confirmed %lld ms after the promotion\n",
            (long long)(e2e_now_ms() - f.promoted_ms));
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE "
                                       "slot_name = '%s' AND active AND NOT temporary", T.table),
                 1, "the promoted server has no slot the relay streams from (log %s)", r->log_path);
    /* The old primary, a standby now, keeps its copy of the slot (docs/operations.md
     * tells operators to drop it there). */
    char old_primary[256];
    e2e_pg_pair_conninfo(&P, E2E_PAIR_PRIMARY, "", old_primary, sizeof old_primary);
    PGconn *old = PQconnectdb(old_primary);
    cr_assert_eq(PQstatus(old), CONNECTION_OK, "%s", PQerrorMessage(old));
    cr_assert_eq(e2e_query_int(old, "SELECT count(*) FROM pg_replication_slots WHERE "
                                    "slot_name = '%s'", T.table), 1);
    PQfinish(old);
    e2e_assert_readyz(r, 200, NULL);
    cr_assert_eq(metric(r, "outbox_relay_slot_recoveries_total"), 1);
    assert_switched(r, &before);
    long after_stop = e2e_writers_committed(writers) - f.committed_at_stop;
    struct e2e_dups dups = {.from_us = f.stopping_us, .until_us = f.stopped_us,
                            .max = (size_t)after_stop};
    e2e_check_delivered_dups(&T, "switchover, wal", false, dups);
    cr_assert(e2e_relay_log_contains(r, "table_read=slot_snapshot"),
              "the recovery did not read the table in the slot's snapshot (log %s)", r->log_path);
}

/* ---- two relays ---------------------------------------------------------- */

static int leaders(struct e2e_relay *a, struct e2e_relay *b)
{
    return (metric(a, "outbox_relay_leader") == 1) + (metric(b, "outbox_relay_leader") == 1);
}

/* Exactly one of @p a and @p b leads, for a second in a row, within @p timeout_ms. */
static void one_leader(struct e2e_relay *a, struct e2e_relay *b, int timeout_ms, const char *when)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    int in_a_row = 0, n = 0;
    while (in_a_row < 10 && e2e_now_ms() < deadline) {
        n = leaders(a, b);
        in_a_row = n == 1 ? in_a_row + 1 : 0;
        e2e_sleep_ms(100);
    }
    cr_assert_eq(in_a_row, 10, "%s: %d leaders (logs %s, %s)", when, n, a->log_path, b->log_path);
}

/* Two relays (sidecars, replicas) on one two-host conninfo, the primary
 * stopped at once under writers and the standby promoted: one leader before
 * and after, the lock on the promoted server, both relays on it; in Kafka
 * every row, each aggregate in order, and nothing created after the
 * failover published twice, as two leaders would. */
Test(e2e, two_relays_one_leader_across_failover, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "tworelays");
    pair_up();
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *a = e2e_relay_start(&T, extra);
    struct e2e_relay *b = e2e_relay_start(&T, extra);
    one_leader(a, b, 20000, "before the failover");

    writers = e2e_writers_start(&T, ROWS_BEFORE, NULL);
    /* Every row created after f.stopped_us is the promoted server's. */
    struct e2e_failover f = e2e_pg_pair_failover(&T, &P, false, writers);
    e2e_writers_wait(writers, f.committed_at_stop + ROWS_AFTER, NULL);
    e2e_writers_stop(writers);
    e2e_wait_all_sent(&T, 60000);

    wait_server(a, P.standby_port, 2, 20000);
    wait_server(b, P.standby_port, 2, 20000);
    one_leader(a, b, 20000, "after the failover");
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' "
                                       "AND granted"), 1,
                 "the promoted server holds no single leader lock");
    check_delivered("two relays", f.stopped_us, IN_FLIGHT_MAX);
}

/* ---- the old primary back, writable ---------------------------------------- */

/* After the promotion the old primary comes back as it was (no
 * standby.signal): a second writable server, on the old timeline, first in
 * the conninfo. target_session_attrs=read-write accepts it. A relay that saw
 * the later timeline refuses it: no leader lock there, nothing of its rows
 * published, not ready, the split brain named; once it is gone the relay
 * goes back to the promoted server. */
Test(e2e, stale_primary_refused, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "staleprim");
    char primary[256];
    pair_up();
    e2e_pg_pair_conninfo(&P, E2E_PAIR_PRIMARY, "", primary, sizeof primary);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    wait_server(r, P.primary_port, 1, 20000);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 1, 100, 0);
    e2e_wait_all_sent(&T, 30000);

    e2e_pg_pair_failover(&T, &P, true, NULL);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 101, 200, 0);
    e2e_wait_all_sent(&T, 30000);
    wait_server(r, P.standby_port, 2, 10000);

    /* The old primary, writable again; a writer that reaches it commits there. */
    e2e_pg_pair_start_old_primary(&P);
    PGconn *old = PQconnectdb(primary);
    cr_assert_eq(PQstatus(old), CONNECTION_OK, "%s", PQerrorMessage(old));
    e2e_exec(old, "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload) "
                  "SELECT 'order', 'stale-' || g, 'created', '{}' FROM generate_series(1, 20) g",
             T.qtable);
    /* The relay's session ends (as at a network cut): the conninfo's first
     * host answers first. */
    cr_assert_geq(e2e_terminate_lock_holders(&T, "outbox-relay"), 1);
    cr_assert(e2e_relay_wait_log(r, "msg=\"postgres server is a stale primary; relaying nothing "
                                    "from it\"", 20000),
              "the relay did not notice the stale primary (log %s)", r->log_path);
    cr_assert(metric_is(r, "outbox_relay_postgres_stale_primary", 1, 5000));
    e2e_assert_readyz(r, 503, "split brain");
    e2e_sleep_ms(3000); /* thirty poll intervals: time enough to claim, were it leading */
    cr_assert_eq(metric(r, "outbox_relay_leader"), 0, "the relay leads on the stale primary");
    cr_assert_eq(e2e_query_int(old, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL AND "
                                    "aggregate_id LIKE 'stale-%%'", T.qtable), 0,
                 "rows of the stale primary were published (log %s)", r->log_path);
    PQfinish(old);

    /* Gone again: the relay is back on the promoted server and relays. */
    e2e_pg_pair_stop_primary(&P);
    cr_assert(metric_is(r, "outbox_relay_postgres_stale_primary", 0, 20000),
              "still on the stale primary (log %s)", r->log_path);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 201, 300, 0);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(metric(r, "outbox_relay_leader"), 1);
    cr_assert_eq(server_of(r).failovers, 1, "a stale primary counted as a failover");
    /* No message of the stale rows: each message matches a row of this server. */
    check_delivered("stale primary", e2e_wall_us(), 0);
}

/* ---- how soon the promoted server's events are published ------------------ */

/* Rounds per capture mode of promotion_to_first_event; without it, the test
 * is skipped (a measurement: docs/performance.md gives its figures). */
#define ROUNDS_ENV "OUTBOX_RELAY_TEST_FAILOVER_ROUNDS"

/* Rows Kafka acknowledged: a reconcile's (wal mode) are counted apart. */
static double published(struct e2e_relay *r)
{
    double n = metric(r, "outbox_relay_events_published_total");
    double rec = metric(r, "outbox_relay_slot_recovered_events_total");
    return n + (rec > 0 ? rec : 0);
}

/* One failover (immediate stop, promotion) with the relay idle and caught
 * up, then one row written on the promoted server: @return the ms from the
 * promotion's end to Kafka's acknowledgement of that row, as the relay's
 * metrics count it (polled every 20 ms). */
static int64_t promotion_to_first_event(bool wal, int round)
{
    char name[16];
    snprintf(name, sizeof name, "%s%d", wal ? "tfwal" : "tfpoll", round);
    e2e_setup(&T, name);
    if (wal)
        e2e_wal_enable(&T);
    pair_up();
    /* No logical messages: wal mode's reconcile can prove the gap closed. */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.message_prefix=", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_enqueue_series(&T, "order", "k", 4, "created", 1, 40, 0);
    if (wal)
        cr_assert(e2e_wal_wait_confirmed(&T, 30000), "not confirmed (log %s)", r->log_path);
    else
        e2e_wait_all_sent(&T, 30000);
    cr_assert(metric_is(r, "outbox_relay_events_published_total", 40, 10000));
    int64_t promoted_ms = e2e_pg_pair_failover(&T, &P, false, NULL).promoted_ms;
    e2e_enqueue_series(&T, "order", "k", 4, "created", 41, 41, 0);
    int64_t deadline = promoted_ms + 60000;
    while (published(r) < 41 && e2e_now_ms() < deadline)
        e2e_sleep_ms(20);
    int64_t ms = e2e_now_ms() - promoted_ms;
    cr_assert_lt(ms, 60000, "nothing published a minute after the promotion (log %s)", r->log_path);
    check_delivered(name, 0, 0);
    e2e_teardown(&T);
    e2e_pg_pair_stop(&P);
    return ms;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

Test(e2e, promotion_to_first_event, .fini = fini, .timeout = 1200)
{
    const char *env = getenv(ROUNDS_ENV);
    int rounds = env ? atoi(env) : 0;
    if (rounds <= 0)
        cr_skip_test("a measurement: set " ROUNDS_ENV "=5 to run it");
    if (rounds > 20)
        rounds = 20;
    for (int mode = 0; mode < 2; mode++) {
        int64_t ms[20];
        for (int i = 0; i < rounds; i++)
            ms[i] = promotion_to_first_event(mode == 1, i);
        qsort(ms, (size_t)rounds, sizeof ms[0], cmp_i64);
        fprintf(stderr, "e2e: promotion to first event, %s, %d failovers: median %lld ms, max %lld ms\n",
                mode ? "wal" : "poll", rounds, (long long)ms[rounds / 2], (long long)ms[rounds - 1]);
    }
}
