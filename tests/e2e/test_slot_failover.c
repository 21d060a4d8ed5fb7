/* test_slot_failover.c — relay.slot_failover = on: migrate refuses what
 * the server cannot honour, naming it; on PostgreSQL 17+ (PG_BINDIR, as
 * tests/matrix-pg sets it) a primary and a standby that synchronises the
 * relay's failover slot, the primary stopped at once and the standby
 * promoted: the relay streams on from the synchronised slot, with no
 * recovery, and every row of the promoted server reaches Kafka. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS 600          /* per batch: before the fence, before the stop, after the promotion */
#define KEYS 12

static struct e2e_ctx T;
static struct e2e_pg_pair P;

static void fini(void)
{
    e2e_unmatched_ok = NULL;
    e2e_teardown(&T);
    e2e_pg_pair_stop(&P);
}

/* migrate with relay.slot_failover = on; @return its exit status, its stderr in @p err. */
static int migrate_failover(char **err)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "migrate";
    e2e_base_args(&T, args, &n);
    args[n++] = "-X";
    args[n++] = "relay.slot_failover=on";
    args[n] = NULL;
    char *out = NULL;
    int rc = e2e_run_relay(args, 60000, &out, err);
    free(out);
    return rc;
}

/* The major version of PG_BINDIR's server (Debian's 15 when unset), from
 * `pg_ctl --version`; 0 when it cannot be run. */
static int bindir_major(void)
{
    const char *bindir = getenv("PG_BINDIR");
    char path[600];
    snprintf(path, sizeof path, "%s/pg_ctl", bindir && *bindir ? bindir : "/usr/lib/postgresql/15/bin");
    const char *argv[] = {path, "--version", NULL};
    char *out = NULL;
    int major = 0;
    if (e2e_run_cmd(argv, 10000, &out, NULL) == 0 && out) {
        const char *p = strstr(out, ") ");
        if (p)
            major = atoi(p + 2);
    }
    free(out);
    return major;
}

static long long slot_count(PGconn *conn)
{
    return e2e_query_int(conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s'",
                         T.table);
}

/* On the stack's own server, which has no standby: below 17 the version is
 * refused (and the relay says so at connect), from 17 on the missing
 * synchronized_standby_slots; no slot either way. */
Test(e2e, slot_failover_migrate_names_what_is_missing, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "slotfomig");
    e2e_wal_enable(&T);
    int version = PQserverVersion(T.conn);
    char *err = NULL;
    int rc = migrate_failover(&err);
    cr_assert_neq(rc, 0, "migrate accepted relay.slot_failover = on on a server without what it "
                         "needs\nstderr: %s", err ? err : "");
    cr_assert(strstr(err, "relay.slot_failover = on cannot be honoured"), "stderr: %s", err);
    if (version < 170000)
        cr_assert(strstr(err, "needs PostgreSQL 17 or later"), "stderr: %s", err);
    else
        cr_assert(strstr(err, "synchronized_standby_slots is not set on the primary") &&
                      strstr(err, "sync_replication_slots = on"),
                  "stderr: %s", err);
    cr_assert_eq(slot_count(T.conn), 0, "a slot was created although migrate refused");
    free(err);
    if (version >= 170000)
        return;
    /* The relay itself says it at connect: its slot would not follow a failover. */
    const char *extra[] = {"relay.slot_failover=on", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "relay.slot_failover = on needs PostgreSQL 17 or later", 20000),
              "the relay did not say its slot cannot follow a failover (log %s)", r->log_path);
}

/* Waits until the standby holds the relay's slot as a synchronised,
 * persistent slot (a temporary one is dropped at promotion) confirmed up to
 * @p lsn. */
static void wait_synced(PGconn *standby, const char *lsn)
{
    int64_t deadline = e2e_now_ms() + 90000;
    for (;;) {
        PGresult *res = e2e_query(standby,
                                  "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' "
                                  "AND synced AND NOT temporary AND confirmed_flush_lsn >= '%s'",
                                  T.table, lsn);
        bool ok = PQgetvalue(res, 0, 0)[0] == '1';
        PQclear(res);
        if (ok)
            return;
        cr_assert_lt(e2e_now_ms(), deadline, "the standby did not synchronise the slot up to %s", lsn);
        e2e_sleep_ms(200);
    }
}

/* The pair with what failover slots need (e2e_pg_pair_up), migrated with
 * relay.slot_failover = on. */
static void pair_up(void)
{
    setenv("PG_PAIR_SLOT_SYNC", "1", 1);
    e2e_pg_pair_up(&T, &P);
    char *err = NULL;
    int rc = migrate_failover(&err);
    cr_assert_eq(rc, 0, "migrate with relay.slot_failover = on exited %d: %s", rc, err ? err : "");
    cr_assert(strstr(err, "failover=on"), "migrate did not say it made a failover slot: %s", err);
    free(err);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE "
                                       "slot_name = '%s' AND failover", T.table),
                 1, "the slot is not a failover slot");
}

Test(e2e, slot_failover_streams_on_after_promotion, .fini = fini, .timeout = 300)
{
    int major = bindir_major();
    if (major < 17) {
        /* criterion shows a skip's reason only when verbose: the test log says it too */
        fprintf(stderr, "e2e: slot_failover_streams_on_after_promotion skipped: needs PostgreSQL "
                        "17 or later in PG_BINDIR (it is %d): tests/matrix-pg 17 18 runs it\n", major);
        cr_skip_test("needs PostgreSQL 17 or later in PG_BINDIR (it is %d): run "
                     "tests/matrix-pg 17 18, which fetches them", major);
    }
    e2e_setup(&T, "slotfo");
    e2e_wal_enable(&T);
    pair_up();
    /* slot_recovery = stop: a relay that found no usable slot after the
     * promotion would stop instead of streaming; no logical message events. */
    const char *extra[] = {"relay.slot_failover=on", "relay.slot_recovery=stop",
                           "relay.message_prefix=", NULL};
    struct e2e_relay *r = e2e_relay_start_capturing(&T, extra, 30000);

    e2e_enqueue_series(&T, "order", "k", KEYS, "created", 1, ROWS, 0);
    cr_assert(e2e_wal_wait_confirmed(&T, 60000), "the slot was not confirmed (log %s)", r->log_path);
    char lsn[64];
    PGresult *res = e2e_query(T.conn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                      "WHERE slot_name = '%s'", T.table);
    snprintf(lsn, sizeof lsn, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    char standby[256];
    e2e_pg_pair_conninfo(&P, E2E_PAIR_STANDBY, "", standby, sizeof standby);
    PGconn *sb = PQconnectdb(standby);
    cr_assert_eq(PQstatus(sb), CONNECTION_OK, "%s", PQerrorMessage(sb));
    wait_synced(sb, lsn);
    PQfinish(sb);

    /* Committed (on both servers: the standby is synchronous) while the
     * relay streams: what it had not confirmed when the primary stops it
     * reads again from the synchronised slot. */
    int64_t dups_from = e2e_wall_us();
    e2e_enqueue_series(&T, "order", "k", KEYS, "paid", ROWS + 1, 2 * ROWS, 0);
    int64_t promoted = e2e_pg_pair_failover(&T, &P, false, NULL).promoted_ms;
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE "
                                       "slot_name = '%s' AND synced AND failover", T.table),
                 1, "the promoted server has no synchronised failover slot");
    e2e_enqueue_series(&T, "order", "k", KEYS, "shipped", 2 * ROWS + 1, 3 * ROWS, 0);

    cr_assert(e2e_wal_wait_confirmed(&T, 60000),
              "the relay did not stream on from the promoted server (log %s)", r->log_path);
    fprintf(stderr, "e2e: the promoted server's rows confirmed %lld ms after the promotion\n",
            (long long)(e2e_now_ms() - promoted));
    cr_assert_geq(e2e_relay_log_count(r, "streaming from the replication slot"), 2,
                  "the relay did not stream again (log %s)", r->log_path);
    cr_assert_not(e2e_relay_log_contains(r, "events may be missing"),
                  "the relay saw a gap (log %s)", r->log_path);
    char *body = NULL;
    cr_assert_eq(e2e_relay_http_get(r, "/metrics", &body), 200);
    cr_assert(strstr(body, "outbox_relay_slot_recoveries_total 0\n"),
              "the relay recovered instead of streaming on (log %s)", r->log_path);
    free(body);
    e2e_assert_readyz(r, 200, NULL);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable), 3 * ROWS);
    /* Rows the relay had confirmed before the synchronised position never
     * come twice; the batch committed just before the stop may. */
    size_t dups = e2e_check_delivered(&T, "slot failover", false, false, dups_from);
    fprintf(stderr, "e2e: %zu rows delivered twice\n", dups);
    cr_assert_leq(dups, (size_t)ROWS, "%zu rows delivered twice (log %s)", dups, r->log_path);
}
