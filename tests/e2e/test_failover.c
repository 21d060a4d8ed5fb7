/* test_failover.c — a relay on a multi-host conninfo: a primary stopped
 * under writers and its synchronous standby promoted, a first host that
 * refuses connections, a first host that accepts and never answers, a
 * session reset by the network. The relay must follow libpq's host list in
 * every case: connect to the host that works, in bounded time, say why the
 * others failed, and relay every row that host has. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS_BEFORE 1500       /* committed on the primary before it stops */
#define ROWS_AFTER 1500        /* committed on the promoted server after */
#define RESUME_MS 30000        /* the relay relays again this soon after a promotion */

static struct e2e_ctx T;
static struct e2e_pg_pair P;
static struct e2e_writers *writers;
static int dead_fd = -1;
static struct e2e_proxy *proxy;

static void fini(void)
{
    e2e_writers_free(writers);
    writers = NULL;
    e2e_teardown(&T);
    e2e_pg_pair_stop(&P);
    if (dead_fd >= 0)
        close(dead_fd);
    dead_fd = -1;
    e2e_proxy_stop(proxy);
    proxy = NULL;
}

/* Every row of the table T.conn reaches is in Kafka, the first deliveries of
 * each aggregate in order; with @p marked every row is marked; with
 * @p dups_from_us a row delivered more than once was created then or later.
 * @return how many rows were delivered more than once. */
static size_t verify_all_delivered(const char *what, bool marked, int64_t dups_from_us)
{
    return e2e_check_delivered(&T, what, marked, false, dups_from_us);
}

/* The pair with the table migrated on its primary (e2e_pg_pair_up). */
static void pair_up(void)
{
    e2e_pg_pair_up(&T, &P);
    e2e_migrate(&T);
}

Test(e2e, failover_under_writers_polling, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "failover");
    pair_up();

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=200", NULL};
    struct e2e_relay *r = e2e_relay_start_capturing(&T, extra, 20000);

    writers = e2e_writers_start(&T, ROWS_BEFORE, r);
    struct e2e_failover f = e2e_pg_pair_failover(&T, &P, false, writers);
    e2e_writers_wait(writers, f.committed_at_stop + ROWS_AFTER, r);
    e2e_writers_stop(writers);

    /* Resumed: the last row the writers committed on the promoted server is
     * marked within RESUME_MS of the promotion. */
    long long last = e2e_query_int(T.conn, "SELECT max(id) FROM %s", T.qtable);
    int64_t left = RESUME_MS - (e2e_now_ms() - f.promoted_ms);
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

/* ---- a session reset by the network --------------------------------------- */

/* Both of a wal relay's connections (statements and the replication stream)
 * through a proxy that resets them, as a firewall or a load balancer does at
 * a failover: the lines that say a connection was lost must give the reason
 * libpq reads from the socket, not the event loop's word for a socket in
 * error ("bad file descriptor", which tells an operator nothing); then the
 * relay reconnects and relays on. */
Test(e2e, reset_connections_say_why_wal, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "resetwal");
    e2e_wal_enable(&T);
    e2e_migrate(&T);
    char *host = e2e_conninfo_value(T.env->pg, "host");
    char *port = e2e_conninfo_value(T.env->pg, "port");
    char *db = e2e_conninfo_value(T.env->pg, "dbname");
    proxy = e2e_proxy_start(atoi(port));
    snprintf(T.pg_conninfo, sizeof T.pg_conninfo, "host=%s port=%d dbname=%s user=postgres",
             host, e2e_proxy_port(proxy), db);
    free(host);
    free(port);
    free(db);
    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start_capturing(&T, extra, 20000);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 1, 100, 0);
    cr_assert(e2e_wal_wait_confirmed(&T, 30000), "the slot was not confirmed (log %s)", r->log_path);

    e2e_proxy_reset(proxy);
    cr_assert(e2e_relay_wait_log(r, "postgres connection lost", 10000) &&
                  e2e_relay_wait_log(r, "replication stream lost", 10000),
              "the relay did not notice the reset (log %s)", r->log_path);
    cr_assert(e2e_relay_wait_log(r, "server closed the connection unexpectedly", 5000),
              "no line gives libpq's reason for the reset (log %s)", r->log_path);
    cr_assert_not(e2e_relay_log_contains(r, "bad file descriptor"),
                  "a lost connection is put as \"bad file descriptor\" (log %s)", r->log_path);

    e2e_enqueue_series(&T, "order", "k", 10, "created", 101, 200, 0);
    cr_assert(e2e_wal_wait_confirmed(&T, 30000), "not confirmed after the reset (log %s)",
              r->log_path);
    cr_assert_geq(e2e_relay_log_count(r, "streaming from the replication slot"), 2,
                  "the relay did not stream again (log %s)", r->log_path);
    verify_all_delivered("reset", false, 0);
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
    pair_up();
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.slot_recovery=stop", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    e2e_enqueue_series(&T, "order", "k", 10, "created", 1, 200, 0);
    cr_assert(e2e_wal_wait_confirmed(&T, 30000), "the slot was not confirmed (log %s)", r->log_path);

    e2e_pg_pair_failover(&T, &P, false, NULL);
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
 * aggregate in order. The recovery reads the table in the snapshot the new
 * slot exported, so a row of the promoted server comes either from the
 * table or from the stream: only rows in flight while the old primary
 * stopped may come twice. */
Test(e2e, failover_wal_reconciles_under_writers, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "failrec");
    e2e_wal_enable(&T);
    pair_up();
    /* No logical messages: the table holds every event, so the gap can be proven closed. */
    const char *extra[] = {"relay.poll_interval_ms=100", "relay.slot_recovery=reconcile",
                           "relay.message_prefix=", NULL};
    struct e2e_relay *r = e2e_relay_start_capturing(&T, extra, 20000);

    writers = e2e_writers_start(&T, ROWS_BEFORE, r);
    struct e2e_failover f = e2e_pg_pair_failover(&T, &P, false, writers);
    e2e_writers_wait(writers, f.committed_at_stop + ROWS_AFTER, r);
    bool reconciled = e2e_relay_wait_log(r, "postgres failover reconciled", 60000);
    long total = e2e_writers_stop(writers); /* before any assertion ends the test */
    cr_assert(reconciled, "the relay did not close the gap (log %s)", r->log_path);
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
    /* What was relayed before the failover is not sent again, nor a row the
     * promoted server committed. */
    struct e2e_dups dups = {.from_us = f.stopping_us, .until_us = f.stopped_us,
                            .max = (size_t)(total - f.committed_at_stop)};
    e2e_check_delivered_dups(&T, "wal failover reconciled", false, dups);
    cr_assert(e2e_relay_log_contains(r, "table_read=slot_snapshot"),
              "the recovery did not read the table in the slot's snapshot (log %s)", r->log_path);
}
