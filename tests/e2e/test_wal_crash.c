/* test_wal_crash.c — relay.capture = wal through crashes and takeovers.
 *
 * Writers keep committing while the relay is SIGKILLed five times and
 * PostgreSQL restarts once: afterwards every row is on Kafka, the first
 * delivery of each in order per aggregate, and the duplicates are counted
 * (only what was in flight at a kill may come twice). A paused leader whose
 * session ends is replaced by the standby, which takes the slot over from
 * the paused one's walsender and fences its Kafka producer: nothing the old
 * leader still had queued becomes visible. While Kafka is away, nothing
 * Kafka has not acknowledged is confirmed, by a commit or by a keepalive,
 * and PostgreSQL restarts without waiting for the relay. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

struct writer {
    pthread_t th;
    char prefix[8];
    atomic_bool stop;
    atomic_long rows;
};

/* Set while a test keeps Kafka away: the tests after it need it back. */
static int outage; /* 0, or 1 for the mock's brokers, 2 for the stack's node */

/* Kafka goes away: the mock's brokers down, or the stack's real node hung
 * (SIGSTOP: its connections stay open, nothing answers, as a broker in
 * trouble does). */
static void kafka_away(void)
{
    bool mock = !T.env->real_kafka;
    if (mock)
        cr_assert(e2e_mock_command(&T, "down -1"));
    else
        cr_assert(e2e_kafka_node(&T, "pause", 1), "needs the stack's own Kafka node");
    outage = mock ? 1 : 2;
}

/* Kafka back, if a test took it away. @return false when the mock's
 * brokers did not come back up. */
static bool kafka_restore(void)
{
    bool ok = true;
    if (outage == 1)
        ok = e2e_mock_command(&T, "up -1");
    else if (outage == 2)
        e2e_kafka_node(&T, "resume", 1);
    outage = 0;
    return ok;
}

static void kafka_back(void)
{
    cr_assert(kafka_restore(), "the mock's brokers did not come back up");
}

/* A wal-mode table for a test that takes Kafka away. */
static void outage_setup(const char *name)
{
    e2e_setup(&T, name);
    if (T.env->real_kafka ? !T.env->kafka_dir : !T.env->mock_control)
        cr_skip_test("needs the mock broker or the stack's own Kafka node to cause an outage");
    e2e_wal_enable(&T);
    e2e_migrate(&T);
}

/* Whether the slot was confirmed at or past @p lsn. */
static bool confirmed_past(const char *lsn)
{
    return e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' "
                                 "AND confirmed_flush_lsn >= '%s'::pg_lsn", T.table, lsn) > 0;
}

static void wal_lsn_now(char out[64])
{
    PGresult *res = e2e_query(T.conn, "SELECT pg_current_wal_lsn()::text");
    snprintf(out, 64, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
}

static void fini(void)
{
    kafka_restore();
    for (int i = 0; i < T.n_relays; i++)
        if (T.relays[i].pid > 0)
            kill(T.relays[i].pid, SIGCONT);
    e2e_teardown(&T);
}

/* Commits transactions of 1 to 20 rows over 50 aggregates of its own until
 * told to stop; a PostgreSQL restart only makes it reconnect. */
static void *write_loop(void *arg)
{
    struct writer *w = arg;
    PGconn *c = e2e_pg_connect();
    unsigned seed = (unsigned)(uintptr_t)w;
    while (!atomic_load(&w->stop)) {
        int n = 1 + (int)(rand_r(&seed) % 20);
        char sql[600];
        snprintf(sql, sizeof sql,
                 "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload) "
                 "SELECT 'order', '%s' || (i %% 50), 'changed', jsonb_build_object('i', i) "
                 "FROM generate_series(1, %d) AS i",
                 T.qtable, w->prefix, n);
        PGresult *res = PQexec(c, sql);
        if (PQresultStatus(res) == PGRES_COMMAND_OK)
            atomic_fetch_add(&w->rows, n);
        PQclear(res);
        if (PQstatus(c) != CONNECTION_OK) {
            e2e_sleep_ms(200);
            PQreset(c);
        }
        e2e_sleep_ms(5);
    }
    PQfinish(c);
    return NULL;
}

static void writers_start(struct writer *w, int n)
{
    for (int i = 0; i < n; i++) {
        snprintf(w[i].prefix, sizeof w[i].prefix, "%c", 'a' + i);
        atomic_store(&w[i].stop, false);
        atomic_store(&w[i].rows, 0);
        cr_assert_eq(pthread_create(&w[i].th, NULL, write_loop, &w[i]), 0);
    }
}

static long writers_stop(struct writer *w, int n)
{
    long rows = 0;
    for (int i = 0; i < n; i++)
        atomic_store(&w[i].stop, true);
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        rows += atomic_load(&w[i].rows);
    }
    return rows;
}

/* Reads everything back; every row at least once, order kept. @return the
 * number of rows delivered more than once. */
static size_t check_all(long written)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    e2e_check(&rep, (long)rows.n == written, "%zu rows in the table, the writers committed %ld", rows.n,
              written);
    size_t dups = 0;
    for (size_t i = 0; i < rows.n; i++) {
        e2e_check(&rep, rows.v[i].deliveries >= 1, "row %" PRId64 " lost", rows.v[i].id);
        dups += rows.v[i].deliveries > 1;
    }
    fprintf(stderr, "e2e: %zu rows, %zu messages, %zu rows delivered twice\n", rows.n, msgs.n, dups);
    e2e_report_assert(&rep, "wal capture through crashes");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
    return dups;
}

Test(e2e, wal_kill9_five_times_and_a_postgres_restart_lose_nothing, .fini = fini, .timeout = 400)
{
    e2e_setup(&T, "walkill");
    e2e_wal_enable(&T);
    e2e_migrate(&T);
    struct writer w[2];
    writers_start(w, 2);
    const char *extra[] = {"relay.reconnect_interval_ms=100", "relay.reconnect_max_ms=500", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    unsigned seed = 7;
    for (int k = 0; k < 5; k++) {
        cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000),
                  "round %d: the relay did not stream (log %s)", k, r->log_path);
        e2e_sleep_ms(300 + (int)(rand_r(&seed) % 700));
        e2e_relay_kill(r);
        r = e2e_relay_start(&T, extra);
    }
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000), "log %s", r->log_path);
    e2e_sleep_ms(500);
    e2e_pg_restart(&T);
    int lost_before = e2e_relay_log_count(r, "replication stream lost");
    e2e_sleep_ms(1500);
    long written = writers_stop(w, 2);
    cr_assert_geq(e2e_relay_log_count(r, "replication stream lost"), lost_before, "log %s", r->log_path);
    cr_assert(e2e_wal_wait_confirmed(&T, 90000), "the slot was not confirmed past the last commit (log %s)",
              r->log_path);
    size_t dups = check_all(written);
    /* Only what was in flight at a kill: at most a Kafka transaction each. */
    cr_assert_leq(dups, (size_t)written / 2, "%zu of %ld rows came twice", dups, written);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0, "the relay did not exit 0 on SIGTERM");
}

Test(e2e, wal_paused_leader_is_replaced_and_fenced, .fini = fini, .timeout = 400)
{
    e2e_setup(&T, "walzombie");
    if (!T.env->real_kafka)
        cr_skip_test("needs a real Kafka broker: the mock neither fences producers nor hides aborted writes");
    e2e_wal_enable(&T);
    e2e_migrate(&T);
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "postgres.conninfo=%s application_name=%s", T.env->pg, T.name);
    const char *a_opts[] = {conninfo, "relay.reconnect_interval_ms=200", "kafka.linger.ms=1000", NULL};
    const char *b_opts[] = {conninfo, "relay.reconnect_interval_ms=200", "relay.poll_interval_ms=200", NULL};
    struct e2e_relay *a = e2e_relay_start(&T, a_opts);
    cr_assert(e2e_relay_wait_log(a, "streaming from the replication slot", 30000), "log %s", a->log_path);
    struct e2e_relay *b = e2e_relay_start(&T, b_opts);
    cr_assert(e2e_relay_wait_log(b, "msg=\"standing by\"", 30000), "B did not stand by (log %s)", b->log_path);

    struct writer w[1];
    writers_start(w, 1);
    e2e_sleep_ms(700); /* A has messages lingering in its queue */
    cr_assert_eq(kill(a->pid, SIGSTOP), 0);
    long long killed = e2e_terminate_lock_holders(&T, T.name);
    cr_assert_eq(killed, 1, "expected to terminate the leader's session, terminated %lld", killed);
    cr_assert(e2e_relay_wait_log(b, "msg=\"became leader\"", 30000), "B did not take over (log %s)", b->log_path);
    /* The paused leader's walsender still holds the slot: B ends it. */
    cr_assert(e2e_relay_wait_log(b, "streaming from the replication slot", 30000),
              "B did not take the slot over (log %s)", b->log_path);
    e2e_sleep_ms(1000);
    long written = writers_stop(w, 1);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "B did not confirm (log %s)", b->log_path);
    cr_assert_eq(kill(a->pid, SIGCONT), 0);
    e2e_sleep_ms(3000); /* anything A would still publish, it does now */
    check_all(written);
    cr_assert(!e2e_relay_log_contains(b, "kafka producer fenced"), "B was fenced (log %s)", b->log_path);
    cr_assert_eq(e2e_relay_stop(b, 30000), 0);
}

/* Kafka goes away while the stream is mid-transaction (the mock's brokers
 * down, or the real node hung) and PostgreSQL restarts meanwhile: nothing
 * is confirmed past what Kafka holds, and once Kafka is back every row
 * arrives, in order. */
Test(e2e, wal_kafka_outage_mid_transaction_loses_nothing, .fini = fini, .timeout = 400)
{
    outage_setup("waloutage");
    struct writer w[2];
    writers_start(w, 2);
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000), "log %s", r->log_path);
    e2e_sleep_ms(1000);
    kafka_away();
    e2e_sleep_ms(4000);
    /* Nothing written during the outage may be confirmed. */
    char during[64];
    wal_lsn_now(during);
    e2e_sleep_ms(2000);
    cr_assert(!confirmed_past(during), "the slot was confirmed past a write made while Kafka was away");
    /* The relay holds a Kafka transaction it cannot finish: a restart of
     * the server (whose walsenders wait for their position to be confirmed
     * when it shuts down) must not wait for Kafka. */
    int64_t t0 = e2e_now_ms();
    e2e_pg_restart(&T);
    int64_t restart_ms = e2e_now_ms() - t0;
    fprintf(stderr, "e2e: PostgreSQL restarted in %" PRId64 " ms during the outage\n", restart_ms);
    cr_assert_lt(restart_ms, 20000, "the server's shutdown waited %" PRId64 " ms for the relay (log %s)",
                 restart_ms, r->log_path);
    kafka_back();
    e2e_sleep_ms(2000);
    long written = writers_stop(w, 2);
    cr_assert(e2e_wal_wait_confirmed(&T, 180000), "the slot was not confirmed after the outage (log %s)",
              r->log_path);
    check_all(written);
    cr_assert(e2e_relay_alive(r), "the relay exited during the outage (log %s)", r->log_path);
}

/* Without Kafka transactions the stream goes on being read while Kafka is
 * away (nothing waits for a commit), so the walsender's keepalives are read
 * too once the writers stop: none of them may confirm a position past events
 * Kafka has not acknowledged. A relay killed then must send them all again. */
Test(e2e, wal_keepalives_never_confirm_unacknowledged_events, .fini = fini, .timeout = 200)
{
    outage_setup("walkeep");
    const char *opts[] = {"relay.fencing=none", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, opts);
    cr_assert(e2e_relay_wait_log(r, "streaming from the replication slot", 30000), "log %s", r->log_path);
    kafka_away();
    struct writer w[1];
    writers_start(w, 1);
    e2e_sleep_ms(1000);
    long written = writers_stop(w, 1);
    char after[64];
    wal_lsn_now(after);
    e2e_sleep_ms(3000); /* the walsender, caught up, sends keepalives */
    cr_assert(!confirmed_past(after), "the slot was confirmed past events Kafka never acknowledged");
    e2e_relay_kill(r);
    kafka_back();
    r = e2e_relay_start(&T, opts);
    cr_assert(e2e_wal_wait_confirmed(&T, 120000), "the slot was not confirmed after the outage (log %s)",
              r->log_path);
    check_all(written);
}
