/* test_failover.c — a relay on a multi-host conninfo: a primary stopped
 * under writers and its synchronous standby promoted, a first host that
 * refuses connections, a first host that accepts and never answers. The
 * relay must follow libpq's host list in every case: connect to the host
 * that works, in bounded time, and relay every row that host has. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define WRITERS 4
#define ROWS_BEFORE 1500       /* committed on the primary before it stops */
#define ROWS_AFTER 1500        /* committed on the promoted server after */
#define RESUME_MS 30000        /* the relay relays again this soon after a promotion */

static struct e2e_ctx T;
static struct e2e_pg_pair P;
static struct writer *writers; /* the running test's, for unanswered_commit() */
static int dead_fd = -1;

static void fini(void)
{
    writers = NULL;
    e2e_unmatched_ok = NULL;
    e2e_teardown(&T);
    e2e_pg_pair_stop(&P);
    if (dead_fd >= 0)
        close(dead_fd);
    dead_fd = -1;
}

/* ---- writers: one aggregate each, one row per transaction, through the
 * two-host conninfo; a lost connection is made again and writing goes on. */

struct writer {
    pthread_t th;
    int id;
    const char *conninfo;
    atomic_long committed;
    atomic_bool *stop;
    atomic_long unanswered[8];  /* the seq of each commit that got no answer */
    atomic_int n_unanswered;
};

/* A primary stopped at once loses the transactions it committed locally but
 * whose commit its writers never heard of (the synchronous standby had not
 * confirmed them). Its walsender and its other sessions could see them all
 * the same, so their events may be in Kafka: a message that matches no row
 * of the promoted server is accepted only for a commit that got no answer. */
static bool unanswered_commit(const struct e2e_msg *m)
{
    int wid;
    long seq;
    if (!writers || !m->key || sscanf(m->key, "w%d", &wid) != 1 || wid < 0 || wid >= WRITERS ||
        !m->value || sscanf(m->value, "{\"i\": %ld}", &seq) != 1)
        return false;
    const struct writer *w = &writers[wid];
    for (int i = 0; i < atomic_load(&w->n_unanswered) && i < 8; i++)
        if (atomic_load(&w->unanswered[i]) == seq)
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

static void wait_committed(struct writer *ws, long target, struct e2e_relay *r)
{
    int64_t deadline = e2e_now_ms() + 60000;
    while (committed(ws) < target && e2e_now_ms() < deadline) {
        cr_assert(e2e_relay_alive(r), "the relay exited (log %s)", r->log_path);
        e2e_sleep_ms(20);
    }
    cr_assert_geq(committed(ws), target, "the writers committed only %ld rows", committed(ws));
}

/* Every row of the table T.conn reaches is in Kafka, the first deliveries of
 * each aggregate in order; with @p marked every row is marked; with
 * @p dups_from_us a row delivered more than once was created then or later.
 * @return how many rows were delivered more than once. */
static size_t verify_all_delivered(const char *what, bool marked, int64_t dups_from_us)
{
    return e2e_check_delivered(&T, what, marked, false, dups_from_us);
}

/* The test's primary and standby, the relay's two-host conninfo in
 * T.pg_conninfo, T.conn on the primary with the table migrated; the standby's
 * own conninfo in @p standby. */
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

/* WRITERS writers on the relay's conninfo until @p stop; returns once
 * ROWS_BEFORE rows are committed, T.conn closed (the primary is about to go). */
static void start_writers(struct writer *ws, atomic_bool *stop, struct e2e_relay *r)
{
    for (int i = 0; i < WRITERS; i++) {
        ws[i] = (struct writer){.id = i, .conninfo = T.pg_conninfo, .stop = stop};
        atomic_init(&ws[i].committed, 0);
        atomic_init(&ws[i].n_unanswered, 0);
        cr_assert_eq(pthread_create(&ws[i].th, NULL, writer_main, &ws[i]), 0);
    }
    writers = ws;
    e2e_unmatched_ok = unanswered_commit;
    wait_committed(ws, ROWS_BEFORE, r);
    PQfinish(T.conn);
    T.conn = NULL;
}

Test(e2e, failover_under_writers_polling, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "failover");
    char standby[256];
    pair_up(standby, sizeof standby);

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "postgres connected", 20000), "never connected (log %s)",
              r->log_path);

    atomic_bool stop = false;
    struct writer ws[WRITERS];
    start_writers(ws, &stop, r);
    e2e_pg_pair_stop_primary(&P);
    long at_stop = committed(ws);
    e2e_pg_pair_promote(&P);
    int64_t promoted_ms = e2e_now_ms();
    fprintf(stderr, "e2e: primary stopped after %ld commits; standby promoted\n", at_stop);
    T.conn = PQconnectdb(standby);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "%s", PQerrorMessage(T.conn));
    e2e_exec(T.conn, "SET client_min_messages = warning");

    wait_committed(ws, at_stop + ROWS_AFTER, r);
    atomic_store(&stop, true);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(ws[i].th, NULL);
    fprintf(stderr, "e2e: %ld commits in all\n", committed(ws));

    /* Resumed: the last row the writers committed on the promoted server is
     * marked within RESUME_MS of the promotion. */
    long long last = e2e_query_int(T.conn, "SELECT max(id) FROM %s", T.qtable);
    int64_t left = RESUME_MS - (e2e_now_ms() - promoted_ms);
    bool resumed = e2e_wait_sql(&T, left > 0 ? (int)left : 1,
                                "SELECT sent_at IS NOT NULL FROM %s WHERE id = %lld", T.qtable,
                                last);
    cr_assert(resumed, "nothing relayed %d s after the promotion: %lld rows unsent (log %s)",
              RESUME_MS / 1000, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NULL",
                                              T.qtable), r->log_path);
    e2e_wait_all_sent(&T, 60000);
    verify_all_delivered("failover under writers", true, 0);
}

/* ---- a host of the list that does not work, the second one does -------- */

static void bad_first_host(const char *name, bool wal, bool accepting)
{
    e2e_setup(&T, name);
    if (wal)
        e2e_wal_enable(&T);
    int port = 0;
    dead_fd = e2e_dead_port(accepting, &port);
    char *host = e2e_conninfo_value(T.env->pg, "host");
    char *pgport = e2e_conninfo_value(T.env->pg, "port");
    char *db = e2e_conninfo_value(T.env->pg, "dbname");
    snprintf(T.pg_conninfo, sizeof T.pg_conninfo,
             "host=127.0.0.1,%s port=%d,%s dbname=%s user=postgres connect_timeout=2", host, port,
             pgport, db);
    free(host);
    free(pgport);
    free(db);
    /* migrate connects blocking: libpq's own walk of the list works there. */
    e2e_migrate(&T);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 1, 200, 0);

    int64_t t0 = e2e_now_ms();
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    /* connect_timeout=2 on the first host, then the second at once */
    cr_assert(e2e_relay_wait_log(r, "postgres connected", 15000),
              "the relay never connected through the second host (log %s)", r->log_path);
    fprintf(stderr, "e2e: connected after %lld ms\n", (long long)(e2e_now_ms() - t0));
    /* The host that failed is named, and why. */
    char line[128];
    snprintf(line, sizeof line, "msg=\"postgres host failed\" host=127.0.0.1 port=%d", port);
    cr_assert(e2e_relay_log_contains(r, line), "no line says the first host failed (log %s)",
              r->log_path);
    cr_assert(e2e_relay_log_contains(r, accepting ? "no answer within connect_timeout (2 s)"
                                                  : "Connection refused"),
              "the first host's failure does not say why (log %s)", r->log_path);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 201, 400, 0);
    if (wal)
        cr_assert(e2e_wal_wait_confirmed(&T, 30000), "the slot was not confirmed (log %s)",
                  r->log_path);
    else
        e2e_wait_all_sent(&T, 30000);
    verify_all_delivered(name, !wal, 0);
}

Test(e2e, first_host_refuses_polling, .fini = fini, .timeout = 120)
{
    bad_first_host("refused", false, false);
}

Test(e2e, first_host_never_answers_polling, .fini = fini, .timeout = 120)
{
    bad_first_host("silent", false, true);
}

Test(e2e, first_host_refuses_wal, .fini = fini, .timeout = 120)
{
    bad_first_host("refusedwal", true, false);
}

Test(e2e, first_host_never_answers_wal, .fini = fini, .timeout = 120)
{
    bad_first_host("silentwal", true, true);
}

/* ---- relay.capture = wal: the slot does not follow a failover ------------ */

/* Before PostgreSQL 17 the promoted server has no slot; one created there
 * afterwards starts past the events the relay never read. With
 * relay.slot_recovery = stop the relay must name the gap and the commands
 * that close it and stay not ready, never stream from such a slot. */
Test(e2e, failover_wal_names_the_gap, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "failwal");
    e2e_wal_enable(&T);
    char standby[256];
    pair_up(standby, sizeof standby);
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.slot_recovery=stop", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 1, 200, 0);
    cr_assert(e2e_wal_wait_confirmed(&T, 30000), "the slot was not confirmed (log %s)", r->log_path);

    PQfinish(T.conn);
    T.conn = NULL;
    e2e_pg_pair_stop_primary(&P);
    e2e_pg_pair_promote(&P);
    T.conn = PQconnectdb(standby);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "%s", PQerrorMessage(T.conn));
    e2e_enqueue_series(&T, "order", "k", 10, "created", 201, 400, 0);
    cr_assert(e2e_relay_wait_log(r, "postgres failover; events may be missing", 30000),
              "the relay did not notice the failover (log %s)", r->log_path);
    cr_assert(e2e_relay_log_contains(r, "slot_recovery=stop"),
              "the gap's line does not say the relay stops (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "is not on it");
    e2e_assert_readyz(r, 503, "`outbox-relay verify` and `replay` what is missing");
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE "
                                       "slot_name = '%s'", T.table), 0,
                 "slot_recovery = stop made the slot (log %s)", r->log_path);

    /* A slot made on the promoted server starts after what the relay read. */
    e2e_migrate(&T);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 401, 600, 0);
    cr_assert(e2e_relay_wait_log(r, "the events between were never relayed", 20000),
              "the relay did not name the gap before the new slot (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "never relayed");
    e2e_sleep_ms(1500);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE "
                                       "slot_name = '%s' AND active", T.table), 0,
                 "the relay streams from the slot made after the failover (log %s)", r->log_path);
    cr_assert(e2e_relay_alive(r), "the relay exited (log %s)", r->log_path);
}

/* With relay.slot_recovery = reconcile the relay closes the gap itself: the
 * slot made on the promoted server, the rows Kafka lacks published from the
 * table, then the stream. Under writers through the failover every row of the
 * promoted server's table must reach Kafka, the first deliveries of each
 * aggregate in order; only rows committed while the recovery ran (between
 * the slot's creation and its reading of the table) may come twice. */
Test(e2e, failover_wal_reconciles_under_writers, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "failrec");
    e2e_wal_enable(&T);
    char standby[256];
    pair_up(standby, sizeof standby);
    /* No logical messages: the table holds every event, so the gap can be proven closed. */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.slot_recovery=reconcile",
                           "relay.message_prefix=", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 20000),
              "never streamed (log %s)", r->log_path);

    atomic_bool stop = false;
    struct writer ws[WRITERS];
    start_writers(ws, &stop, r);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t stopped_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    e2e_pg_pair_stop_primary(&P);
    long at_stop = committed(ws);
    e2e_pg_pair_promote(&P);
    fprintf(stderr, "e2e: primary stopped after %ld commits; standby promoted\n", at_stop);
    T.conn = PQconnectdb(standby);
    cr_assert_eq(PQstatus(T.conn), CONNECTION_OK, "%s", PQerrorMessage(T.conn));
    e2e_exec(T.conn, "SET client_min_messages = warning");

    wait_committed(ws, at_stop + ROWS_AFTER, r);
    bool reconciled = e2e_relay_wait_log(r, "postgres failover reconciled", 60000);
    atomic_store(&stop, true); /* the writers end before any assertion ends the test */
    for (int i = 0; i < WRITERS; i++)
        pthread_join(ws[i].th, NULL);
    cr_assert(reconciled, "the relay did not close the gap (log %s)", r->log_path);
    long total = committed(ws);
    fprintf(stderr, "e2e: %ld commits in all\n", total);
    cr_assert(e2e_relay_log_contains(r, "slot_recovery=reconcile"),
              "the gap's line does not say the relay reconciles (log %s)", r->log_path);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the new slot was not confirmed (log %s)",
              r->log_path);
    e2e_assert_readyz(r, 200, NULL);
    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    cr_assert(strstr(body, "outbox_relay_slot_recoveries_total 1\n"), "no recovery counted");
    cr_assert_null(strstr(body, "outbox_relay_slot_recovered_events_total 0\n"),
                   "a recovery under writers published nothing");
    free(body);
    /* What was relayed before the failover is not sent again: the rows that
     * come twice were committed on the promoted server while the recovery ran. */
    size_t dups = verify_all_delivered("wal failover reconciled", false, stopped_us);
    cr_assert_lt(dups, (size_t)(total - at_stop), "%zu rows delivered twice (log %s)", dups,
                 r->log_path);
}
