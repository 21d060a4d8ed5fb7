/* test_quiet.c — writers send no NOTIFY while the relay claims anyway
 * (schema/004, the quiet lock), and no row waits for a poll because of it.
 *
 * The relay runs with a poll interval of a minute: a row that no NOTIFY woke
 * it for and no claim found would wait that long, and these tests would see
 * it. A separate LISTEN counts the notifications the writers sent. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define LOAD_ROWS 3000
#define AGGREGATES 20

static struct e2e_ctx T;

static struct e2e_pgbouncer bouncer;

static void fini(void)
{
    e2e_pgbouncer_stop(&bouncer);
    e2e_teardown(&T);
}

static PGconn *connect_or_die(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

/* Single-row transactions, one after another on each of LOAD_WRITERS
 * connections, as fast as the server takes them: every one of them would
 * send a NOTIFY, several of them during each claim. */
#define LOAD_WRITERS 3

struct load {
    const char *conninfo;
    pthread_t th[LOAD_WRITERS];
    int rows;                       /* per writer */
    atomic_int written;
    atomic_int started;             /* numbers the writers */
    atomic_bool stop;
    char error[256];
};

static void *load_thread(void *arg)
{
    struct load *l = arg;
    int k = l->started++;
    PGconn *c = PQconnectdb(l->conninfo);
    char sql[256];
    /* Aggregates of its own: two writers' transactions on one aggregate
     * would have no order of their own to keep (an application serialises
     * them, with a row lock on the aggregate). */
    snprintf(sql, sizeof sql,
             "SELECT %s('order', 'q%d-' || ($1::int %% %d), 'created', jsonb_build_object('n', $1::int))",
             T.qenqueue, k, AGGREGATES);
    for (int i = 0; i < l->rows && !l->stop && PQstatus(c) == CONNECTION_OK; i++) {
        char n[16];
        snprintf(n, sizeof n, "%d", i);
        const char *params[] = { n };
        PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            snprintf(l->error, sizeof l->error, "%s", PQresultErrorMessage(r));
            PQclear(r);
            break;
        }
        PQclear(r);
        l->written++;
    }
    PQfinish(c);
    return NULL;
}

static void load_start(struct load *l, const char *conninfo, int rows)
{
    memset(l, 0, sizeof *l);
    l->conninfo = conninfo;
    l->rows = rows / LOAD_WRITERS;
    for (int k = 0; k < LOAD_WRITERS; k++)
        cr_assert_eq(pthread_create(&l->th[k], NULL, load_thread, l), 0);
}

static int load_join(struct load *l)
{
    for (int k = 0; k < LOAD_WRITERS; k++)
        pthread_join(l->th[k], NULL);
    cr_assert_eq(l->error[0], '\0', "a writer failed: %s", l->error);
    return l->written;
}

/* The notifications @p listener received so far: everything its socket
 * holds, not only what one read takes in. */
static int notifications(PGconn *listener)
{
    int n = 0;
    struct pollfd pfd = { .fd = PQsocket(listener), .events = POLLIN };
    do {
        cr_assert(PQconsumeInput(listener), "listener: %s", PQerrorMessage(listener));
        PGnotify *nf;
        while ((nf = PQnotifies(listener)) != NULL) {
            n++;
            PQfreemem(nf);
        }
    } while (poll(&pfd, 1, 0) > 0);
    return n;
}

/* outbox_relay_quiet from the relay's /metrics; -1 when it cannot be read. */
static int quiet_gauge(struct e2e_relay *relay)
{
    char *body = NULL;
    int v = -1;
    if (e2e_relay_http_get(relay, "/metrics", &body) == 200 && body) {
        const char *p = strstr(body, "\noutbox_relay_quiet ");
        if (p)
            v = atoi(p + strlen("\noutbox_relay_quiet "));
    }
    free(body);
    return v;
}

static PGconn *listen_on_channel(void)
{
    PGconn *l = connect_or_die(T.env->pg);
    e2e_exec(l, "LISTEN \"%s\"", T.channel);
    return l;
}

/* A fresh table and a leading relay that polls once a minute. */
static struct e2e_relay *leading_relay(const char *name)
{
    static const char *const opts[] = { "relay.poll_interval_ms=60000", "log.level=debug", NULL };
    e2e_setup(&T, name);
    e2e_migrate(&T);
    struct e2e_relay *relay = e2e_relay_start(&T, opts);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "no leader (log %s)",
              relay->log_path);
    return relay;
}

Test(e2e, a_busy_relay_spares_writers_the_notify, .fini = fini, .timeout = 200)
{
    struct e2e_relay *relay = leading_relay("quiet");
    PGconn *listener = listen_on_channel();

    struct load l;
    load_start(&l, T.env->pg, LOAD_ROWS);
    int written = load_join(&l);
    cr_assert(e2e_wait_sql(&T, 60000, "SELECT count(*) = %d FROM %s WHERE sent_at IS NOT NULL",
                           written, T.qtable),
              "%lld of %d rows sent: a row waited for the poll (log %s)",
              e2e_count_where(&T, "sent_at IS NOT NULL"), written, relay->log_path);
    int during = notifications(listener);
    fprintf(stderr, "e2e: quiet: %d single-row transactions sent %d NOTIFYs\n", written, during);
    cr_assert(e2e_relay_log_contains(relay, "quiet: writers send no NOTIFY"),
              "the relay never took the quiet lock (log %s)", relay->log_path);
    cr_assert_lt(during, written / 2, "%d of %d writers sent a NOTIFY to a relay that claimed anyway",
                 during, written);

    /* Idle again, the relay is woken by the next row's NOTIFY, not the poll. */
    cr_assert(e2e_relay_wait_log(relay, "quiet: writers notify again", 10000),
              "the relay kept the quiet lock with nothing to claim (log %s)", relay->log_path);
    e2e_sleep_ms(500);
    (void)notifications(listener);
    int64_t t0 = e2e_now_ms();
    e2e_exec(T.conn, "SELECT %s('order', 'late', 'created', '{}')", T.qenqueue);
    cr_assert(e2e_wait_sql(&T, 10000, "SELECT count(*) = 0 FROM %s WHERE sent_at IS NULL", T.qtable),
              "a row written to an idle relay was not sent within 10 s (log %s)", relay->log_path);
    fprintf(stderr, "e2e: quiet: a row after the load sent in %lld ms\n",
            (long long)(e2e_now_ms() - t0));
    /* The listener's backend passes it on in its own time. */
    int got = 0;
    for (int i = 0; i < 100 && got == 0; i++) {
        got += notifications(listener);
        if (got == 0)
            e2e_sleep_ms(20);
    }
    cr_assert_eq(got, 1, "the row written to an idle relay sent %d NOTIFYs, not one", got);

    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = { 0 };
    e2e_read_back(&T, 60000, &rows, &msgs, &rep);
    e2e_check(&rep, rows.n == (size_t)written + 1, "%zu rows, expected %d", rows.n, written + 1);
    e2e_report_assert(&rep, "rows written while the relay was quiet");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
    PQfinish(listener);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}

/* The race the skip lock closes: a writer that left its NOTIFY out while the
 * relay was quiet, and commits only after the relay found nothing more.
 * The writers connect with @p conninfo. */
static void straggler(struct e2e_relay *relay, const char *conninfo)
{
    struct load l;
    load_start(&l, conninfo, 1000000);
    cr_assert(e2e_relay_wait_log(relay, "quiet: writers send no NOTIFY", 20000),
              "the relay never took the quiet lock under load (log %s)", relay->log_path);
    /* Operators see it: the gauge is 1 while the lock is held. */
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        seen = quiet_gauge(relay) == 1;
        if (!seen)
            e2e_sleep_ms(50);
    }
    cr_assert(seen, "outbox_relay_quiet never read 1 under load");

    /* A transaction that writes a row while the relay is quiet and stays
     * open: its trigger sent no NOTIFY and holds the skip lock. */
    /* The quiet lock's key, as docs/operations.md gives it (the schema). */
    char quiet_key[160];
    snprintf(quiet_key, sizeof quiet_key, "hashtextextended('outbox-relay:quiet:public.%s', 0)",
             T.table);
    PGconn *w = connect_or_die(conninfo);
    bool skipped = false;
    for (int tries = 0; tries < 200 && !skipped; tries++) {
        e2e_exec(w, "BEGIN");
        e2e_exec(w, "SELECT %s('order', 'straggler', 'created', '{}')", T.qenqueue);
        /* It holds the skip lock, and the relay holds the quiet lock now. A
         * writer that found the quiet lock free on its second look notified
         * (and holds the skip lock too), but then the relay cannot have
         * taken the quiet lock again: it waits for the skip lock first. */
        skipped = e2e_query_int(w, "SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = "
                                   "pg_backend_pid() AND locktype = 'advisory' AND granted") > 0 &&
                  e2e_query_int(w, "SELECT CASE WHEN pg_try_advisory_lock_shared(%s) THEN "
                                   "pg_advisory_unlock_shared(%s)::int ELSE 0 END",
                                quiet_key, quiet_key) == 0;
        if (!skipped) {
            e2e_exec(w, "ROLLBACK");
            e2e_sleep_ms(10);
        }
    }
    cr_assert(skipped, "no write found the relay quiet");
    /* From here on the relay may leave the quiet lock, and take it again
     * while the load lasts, but never stop being quiet: its check cannot
     * take the skip lock this writer holds. */
    int quiet_off_before = e2e_relay_log_count(relay, "quiet: writers notify again");
    PGconn *listener = listen_on_channel();

    l.stop = true;
    int written = load_join(&l);
    cr_assert(e2e_wait_sql(&T, 60000, "SELECT count(*) = %d FROM %s WHERE sent_at IS NOT NULL",
                           written, T.qtable),
              "the load's rows were not sent (log %s)", relay->log_path);
    /* Nothing more to claim: the relay released the quiet lock and waits
     * for the open writer before its last claim. */
    e2e_sleep_ms(1500);
    int quiet_off = e2e_relay_log_count(relay, "quiet: writers notify again");
    cr_assert_eq(quiet_off, quiet_off_before,
                 "the relay stopped being quiet (%d times) while a writer that sent no NOTIFY "
                 "was open (log %s)", quiet_off - quiet_off_before, relay->log_path);

    (void)notifications(listener); /* the load's */
    int64_t t0 = e2e_now_ms();
    e2e_exec(w, "COMMIT");
    cr_assert(e2e_wait_sql(&T, 10000, "SELECT count(*) = 0 FROM %s WHERE sent_at IS NULL", T.qtable),
              "the row of a writer that sent no NOTIFY was not sent within 10 s of its commit; "
              "the poll is a minute away (log %s)", relay->log_path);
    int64_t took = e2e_now_ms() - t0;
    fprintf(stderr, "e2e: quiet: the straggler's row sent %lld ms after its commit\n", (long long)took);
    /* The relay looks for it every 100 ms (QUIET_LAST_CHECK_MS); a loaded
     * machine gets a margin. */
    cr_assert_lt(took, 3000, "the straggler's row took %lld ms after its commit (log %s)",
                 (long long)took, relay->log_path);
    cr_assert_eq(notifications(listener), 0, "the straggler sent a NOTIFY after all");
    cr_assert(e2e_relay_wait_log(relay, "quiet: writers notify again", 10000),
              "the relay stayed quiet (log %s)", relay->log_path);
    cr_assert_eq(quiet_gauge(relay), 0, "outbox_relay_quiet is not 0 once writers notify again");
    PQfinish(listener);
    PQfinish(w);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0);
}

Test(e2e, a_writer_that_sent_no_notify_is_not_left_behind, .fini = fini, .timeout = 200)
{
    struct e2e_relay *relay = leading_relay("quiet_late");
    straggler(relay, T.env->pg);
}

/* The same, the writers behind PgBouncer in transaction mode, as many
 * applications run: the trigger's locks live no longer than its statement
 * or its transaction, which is what such a pooler keeps together. */
Test(e2e, writers_behind_transaction_pooling, .fini = fini, .timeout = 200)
{
    struct e2e_relay *relay = leading_relay("quiet_pooled");
    e2e_pgbouncer_start(&T, &bouncer, "transaction", 2);
    char ci[512];
    e2e_pgbouncer_conninfo(&bouncer, "", ci, sizeof ci);
    straggler(relay, ci);
}
