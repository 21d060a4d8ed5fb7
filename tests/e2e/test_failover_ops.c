/* test_failover_ops.c — failovers as operators live them, against a primary
 * and its synchronous standby of the test's own (tests/support/pg_pair.sh):
 * a planned switchover under writers (the old primary rejoining as a
 * standby), two relays on one two-host conninfo across a failover, and the
 * old primary coming back writable after the promotion (split brain). What
 * is checked is what an operator checks: every row in Kafka, per-aggregate
 * order, duplicates only of rows in flight at the switch, which relay
 * leads, and what /status and /metrics say about the server. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define WRITERS 4
#define ROWS_BEFORE 1000       /* committed on the primary before the switch */
#define ROWS_AFTER 1000        /* committed on the promoted server after */
#define BATCH 200              /* relay.batch_size: two batches are in flight at most */

static struct e2e_ctx T;
static struct e2e_pg_pair P;
static struct writer *writers;

static void fini(void)
{
    writers = NULL;
    e2e_unmatched_ok = NULL;
    e2e_teardown(&T);
    e2e_pg_pair_stop(&P);
}

/* ---- writers: one aggregate each, one row per transaction, through the
 * two-host conninfo; a lost connection is made again and writing goes on. */

struct writer {
    pthread_t th;
    int id;
    const char *conninfo;
    atomic_long committed;
    atomic_bool *stop;
    atomic_long unanswered[8]; /* the seq of each commit that got no answer */
    atomic_int n_unanswered;
};

/* A commit the stopped primary never answered may be on Kafka (its walsender
 * or sessions saw it) and not on the promoted server: that message, and no
 * other, may match no row. */
static bool unanswered_commit(const struct e2e_msg *m)
{
    int wid;
    long seq;
    if (!writers || !m->key || sscanf(m->key, "w%d", &wid) != 1 || wid < 0 || wid >= WRITERS ||
        !m->value || sscanf(m->value, "{\"i\": %ld}", &seq) != 1)
        return false;
    for (int i = 0; i < atomic_load(&writers[wid].n_unanswered) && i < 8; i++)
        if (atomic_load(&writers[wid].unanswered[i]) == seq)
            return true;
    return false;
}

static PGconn *writer_connect(const char *conninfo, atomic_bool *stop)
{
    while (!atomic_load(stop)) {
        PGconn *c = PQconnectdb(conninfo);
        if (PQstatus(c) == CONNECTION_OK)
            return c;
        PQfinish(c);
        usleep(100 * 1000);
    }
    return NULL;
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char sql[512];
    PGconn *c = writer_connect(w->conninfo, w->stop);
    for (long seq = 1; c && !atomic_load(w->stop); seq++) {
        snprintf(sql, sizeof sql,
                 "SELECT %s('order', 'w%d', 'created', jsonb_build_object('i', %ld))", T.qenqueue,
                 w->id, seq);
        PGresult *res = PQexec(c, sql);
        bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
        PQclear(res);
        if (ok) {
            atomic_fetch_add(&w->committed, 1);
            continue;
        }
        int k = atomic_load(&w->n_unanswered);
        if (k < 8) {
            atomic_store(&w->unanswered[k], seq);
            atomic_store(&w->n_unanswered, k + 1);
        }
        PQfinish(c);
        c = writer_connect(w->conninfo, w->stop);
    }
    PQfinish(c);
    return NULL;
}

static long committed(struct writer *ws)
{
    long n = 0;
    for (int i = 0; i < WRITERS; i++)
        n += atomic_load(&ws[i].committed);
    return n;
}

static void wait_committed(struct writer *ws, long target)
{
    int64_t deadline = e2e_now_ms() + 60000;
    while (committed(ws) < target && e2e_now_ms() < deadline)
        e2e_sleep_ms(20);
    cr_assert_geq(committed(ws), target, "the writers committed only %ld rows", committed(ws));
}

static void start_writers(struct writer *ws, atomic_bool *stop)
{
    for (int i = 0; i < WRITERS; i++) {
        ws[i] = (struct writer){.id = i, .conninfo = T.pg_conninfo, .stop = stop};
        atomic_init(&ws[i].committed, 0);
        atomic_init(&ws[i].n_unanswered, 0);
        cr_assert_eq(pthread_create(&ws[i].th, NULL, writer_main, &ws[i]), 0);
    }
    writers = ws;
    e2e_unmatched_ok = unanswered_commit;
    wait_committed(ws, ROWS_BEFORE);
}

static void stop_writers(struct writer *ws, atomic_bool *stop)
{
    atomic_store(stop, true);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(ws[i].th, NULL);
    fprintf(stderr, "e2e: %ld commits in all\n", committed(ws));
}

/* The pair, the relay's two-host conninfo in T.pg_conninfo, T.conn on the
 * primary with the table migrated; the standby's own conninfo in @p standby. */
static void pair_up(char *standby, size_t len)
{
    e2e_pg_pair_start(&T, &P);
    e2e_pg_pair_conninfo(&P, E2E_PAIR_BOTH, "target_session_attrs=read-write connect_timeout=2",
                         T.pg_conninfo, sizeof T.pg_conninfo);
    char primary[256];
    e2e_pg_pair_conninfo(&P, E2E_PAIR_PRIMARY, "", primary, sizeof primary);
    e2e_pg_pair_conninfo(&P, E2E_PAIR_STANDBY, "", standby, len);
    PQfinish(T.conn);
    T.conn = PQconnectdb(primary);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "%s", PQerrorMessage(T.conn));
    e2e_migrate(&T);
}

/* T.conn on the promoted standby. */
static void on_standby(const char *standby)
{
    PQfinish(T.conn);
    T.conn = PQconnectdb(standby);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "%s", PQerrorMessage(T.conn));
    e2e_exec(T.conn, "SET client_min_messages = warning");
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
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
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    size_t dups = 0;
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *row = &rows.v[i];
        e2e_check(&rep, row->deliveries >= 1, "row %lld lost", (long long)row->id);
        e2e_check(&rep, T.wal || row->sent, "row %lld has sent_at NULL", (long long)row->id);
        e2e_check(&rep, row->deliveries < 2 || row->created_us < switch_us,
                  "row %lld, created after the switch, delivered %d times", (long long)row->id,
                  row->deliveries);
        dups += row->deliveries > 1;
    }
    e2e_check(&rep, dups <= max_dups, "%zu rows delivered more than once (in flight: %zu at most)",
              dups, max_dups);
    fprintf(stderr, "e2e: %s: %zu messages for %zu rows, %zu rows delivered more than once\n", what,
            msgs.n, rows.n, dups);
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
    return dups;
}

/* ---- a planned switchover ------------------------------------------------ */

/* Fast stop of the primary (its WAL all on the standby), the standby
 * promoted, the old primary back as a standby of it: the conninfo's first
 * host is now a standby, which target_session_attrs=read-write passes over.
 * Nothing may be lost, and only rows in flight at the switch (produced, not
 * yet marked) may come twice. /status and /metrics name the new server and
 * count the failover. */
Test(e2e, switchover_under_writers_polling, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "switchover");
    char standby[256];
    pair_up(standby, sizeof standby);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    struct server_seen before = wait_server(r, P.primary_port, 1, 20000);
    cr_assert_eq(before.failovers, 0);
    cr_assert_neq(before.system_id[0], '\0', "no system identifier in /status");

    atomic_bool stop = false;
    struct writer ws[WRITERS];
    start_writers(ws, &stop);
    PQfinish(T.conn);
    T.conn = NULL;
    e2e_pg_pair_stop_primary_fast(&P);
    int64_t switch_us = now_us(); /* every row created later is the promoted server's */
    long at_stop = committed(ws);
    e2e_pg_pair_promote(&P);
    int64_t promoted_ms = e2e_now_ms();
    e2e_pg_pair_rejoin(&P);
    fprintf(stderr, "e2e: switchover after %ld commits; the old primary streams from the new one\n",
            at_stop);
    on_standby(standby);
    wait_committed(ws, at_stop + ROWS_AFTER);
    stop_writers(ws, &stop);
    e2e_wait_all_sent(&T, 60000);
    fprintf(stderr, "e2e: every row marked %lld ms after the promotion\n",
            (long long)(e2e_now_ms() - promoted_ms));

    /* The relay is on the promoted server, timeline 2 of the same system. */
    struct server_seen after = wait_server(r, P.standby_port, 2, 10000);
    cr_assert_str_eq(after.system_id, before.system_id, "another system after a switchover");
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
             "system_identifier=\"%s\"} 1\n", P.standby_port, before.system_id);
    cr_assert(strstr(body, info), "no %s in /metrics", info);
    free(body);
    /* `outbox-relay status` says it in one line. */
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
    check_delivered("switchover", switch_us, 2 * BATCH);
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
    char standby[256];
    pair_up(standby, sizeof standby);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *a = e2e_relay_start(&T, extra);
    struct e2e_relay *b = e2e_relay_start(&T, extra);
    one_leader(a, b, 20000, "before the failover");

    atomic_bool stop = false;
    struct writer ws[WRITERS];
    start_writers(ws, &stop);
    PQfinish(T.conn);
    T.conn = NULL;
    e2e_pg_pair_stop_primary(&P);
    int64_t switch_us = now_us(); /* every row created later is the promoted server's */
    long at_stop = committed(ws);
    e2e_pg_pair_promote(&P);
    on_standby(standby);
    wait_committed(ws, at_stop + ROWS_AFTER);
    stop_writers(ws, &stop);
    e2e_wait_all_sent(&T, 60000);

    wait_server(a, P.standby_port, 2, 20000);
    wait_server(b, P.standby_port, 2, 20000);
    one_leader(a, b, 20000, "after the failover");
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' "
                                       "AND granted"), 1,
                 "the promoted server holds no single leader lock");
    check_delivered("two relays", switch_us, 2 * BATCH);
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
    char standby[256], primary[256];
    pair_up(standby, sizeof standby);
    e2e_pg_pair_conninfo(&P, E2E_PAIR_PRIMARY, "", primary, sizeof primary);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    wait_server(r, P.primary_port, 1, 20000);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 1, 100, 0);
    e2e_wait_all_sent(&T, 30000);

    PQfinish(T.conn);
    T.conn = NULL;
    e2e_pg_pair_stop_primary_fast(&P);
    e2e_pg_pair_promote(&P);
    on_standby(standby);
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
    check_delivered("stale primary", now_us(), 0);
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
    char standby[256];
    pair_up(standby, sizeof standby);
    /* No logical messages: wal mode's reconcile can prove the gap closed. */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.message_prefix=", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_enqueue_series(&T, "order", "k", 4, "created", 1, 40, 0);
    if (wal)
        cr_assert(e2e_wal_wait_confirmed(&T, 30000), "not confirmed (log %s)", r->log_path);
    else
        e2e_wait_all_sent(&T, 30000);
    cr_assert(metric_is(r, "outbox_relay_events_published_total", 40, 10000));
    PQfinish(T.conn);
    T.conn = NULL;
    e2e_pg_pair_stop_primary(&P);
    e2e_pg_pair_promote(&P);
    int64_t promoted_ms = e2e_now_ms();
    on_standby(standby);
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
