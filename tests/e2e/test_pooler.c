/* test_pooler.c — relays behind Debian's real PgBouncer (tests/support/pgbouncer.sh).
 *
 * The leader lock is a session advisory lock, so a pooler that hands one
 * connection's statements to several server sessions (pool_mode=transaction
 * or statement) must be refused, clearly and without two relays publishing;
 * session pooling must keep working; and a standby behind a lock that a
 * pooled server session kept after its client left must name that session. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

#define ROWS 2000

static struct e2e_ctx T;
static struct e2e_pgbouncer bouncer;

/* Other clients of the pooler. A transaction pooler serves many, and each of
 * their transactions takes whichever server session is idle, so a relay's
 * next transaction lands on another one sooner or later. Alone, a client is
 * handed the server session it used last (PgBouncer reuses the most recent),
 * every time, and a relay standing by behind a lock would never see its
 * statements move, nor refuse. */
#define TRAFFIC_CLIENTS 2
static struct {
    pthread_t th[TRAFFIC_CLIENTS];
    int n;
    volatile bool stop;
    char conninfo[480];
} traffic;

static void *traffic_thread(void *arg)
{
    (void)arg;
    PGconn *c = PQconnectdb(traffic.conninfo);
    while (!traffic.stop && PQstatus(c) == CONNECTION_OK)
        PQclear(PQexec(c, "SELECT pg_sleep(0.02)"));
    PQfinish(c);
    return NULL;
}

static void traffic_start(void)
{
    e2e_pgbouncer_conninfo(&bouncer, "application_name=other-client", traffic.conninfo,
                           sizeof traffic.conninfo);
    traffic.stop = false;
    for (traffic.n = 0; traffic.n < TRAFFIC_CLIENTS; traffic.n++)
        cr_assert_eq(pthread_create(&traffic.th[traffic.n], NULL, traffic_thread, NULL), 0);
}

static void traffic_stop(void)
{
    traffic.stop = true;
    for (; traffic.n > 0; traffic.n--)
        pthread_join(traffic.th[traffic.n - 1], NULL);
}

static void fini(void)
{
    traffic_stop();
    e2e_pgbouncer_stop(&bouncer);
    e2e_teardown(&T);
}

/* Starts PgBouncer in @p mode in front of the stack's PostgreSQL. */
static void bouncer_start(const char *mode, int pool_size)
{
    e2e_pgbouncer_start(&T, &bouncer, mode, pool_size);
}

/* "postgres.conninfo=…" through PgBouncer. */
static const char *pooled_conninfo(void)
{
    static char buf[512];
    char ci[480];
    e2e_pgbouncer_conninfo(&bouncer, "", ci, sizeof ci);
    snprintf(buf, sizeof(buf), "postgres.conninfo=%s", ci);
    return buf;
}

static void enqueue(int lo, int hi)
{
    e2e_exec(T.conn,
             "SELECT count(%s('customer', 'c' || (i %% 40), 'updated', jsonb_build_object('i', i)))"
             "  FROM generate_series(%d, %d) AS i",
             T.qenqueue, lo, hi);
}

static cJSON *status_doc(struct e2e_relay *r)
{
    char *body;
    int code = e2e_relay_http_get(r, "/status", &body);
    cr_assert_eq(code, 200, "/status answered %d: %s", code, body);
    cJSON *doc = cJSON_Parse(body);
    cr_assert_not_null(doc, "/status is not JSON: %s", body);
    free(body);
    return doc;
}

static const char *lock_key_sql(void)
{
    static char buf[200];
    snprintf(buf, sizeof(buf), "hashtextextended('outbox-relay:leader:' || 'public.%s', 0)",
             T.table);
    return buf;
}

/* Sessions that hold the test table's leader lock. */
static long long lock_holders(void)
{
    return e2e_query_int(T.conn,
                         "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                         "AND objsubid = 1 AND ((classid::int8 << 32) | objid::int8) = %s",
                         lock_key_sql());
}

/* Every row exactly once in Kafka and marked sent. */
static void assert_exactly_once(const char *what)
{
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep);
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *row = &rows.v[i];
        e2e_check(&rep, row->deliveries == 1, "row %lld delivered %d times, expected once",
                  (long long)row->id, row->deliveries);
        e2e_check(&rep, row->sent, "row %lld has sent_at NULL", (long long)row->id);
    }
    e2e_report_assert(&rep, what);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

/* Two relays through PgBouncer in @p mode with @p pool_size server
 * connections, alone on the pooler or (@p with_traffic) among other clients: each
 * refuses at start with exit status 78, naming the cause and the fix, and
 * publishes nothing; a relay connected directly afterwards relays every row once. */
static void two_relays_are_refused(const char *mode, int pool_size, bool with_traffic,
                                   const char *cause)
{
    e2e_setup(&T, "pooler");
    e2e_migrate(&T);
    enqueue(1, ROWS);
    bouncer_start(mode, pool_size);
    if (with_traffic)
        traffic_start();

    const char *extra[] = {"relay.poll_interval_ms=100", "relay.batch_size=100",
                           pooled_conninfo(), NULL};
    struct e2e_relay *relays[2];
    for (int i = 0; i < 2; i++)
        relays[i] = e2e_relay_start(&T, extra);
    for (int i = 0; i < 2; i++) {
        struct e2e_relay *r = relays[i];
        int rc = e2e_wait_exit(r, 30000);
        cr_assert_eq(rc, 78, "relay %d through pool_mode=%s exited %d, expected 78 (log %s)", i,
                     mode, rc, r->log_path);
        cr_assert(e2e_relay_log_contains(r, "msg=\"refusing to relay\""),
                  "relay %d exited without a refusal line (log %s)", i, r->log_path);
        cr_assert(e2e_relay_log_contains(r, "pooled per transaction or statement"),
                  "relay %d refused without naming the cause (log %s)", i, r->log_path);
        cr_assert(e2e_relay_log_contains(r, "connect the relay directly or through session pooling"),
                  "relay %d refused without naming the fix (log %s)", i, r->log_path);
        cr_assert(!cause || e2e_relay_log_contains(r, cause),
                  "relay %d refused without saying \"%s\" (log %s)", i, cause, r->log_path);
        cr_assert(!e2e_relay_log_contains(r, "msg=\"became leader\""),
                  "relay %d led behind a transaction pooler (log %s)", i, r->log_path);
    }
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable),
                 0, "a refused relay marked rows");
    traffic_stop();
    cr_assert_eq(e2e_pgbouncer_stop(&bouncer), 0);
    cr_assert_eq(lock_holders(), 0, "a refused relay left the leader lock held");

    const char *direct[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *c = e2e_relay_start(&T, direct);
    cr_assert(e2e_relay_wait_log(c, "msg=\"became leader\"", 30000),
              "a directly connected relay did not lead (log %s)", c->log_path);
    e2e_wait_all_sent(&T, 120000);
    assert_exactly_once("relays refused behind a transaction pooler, then one direct relay");
    cr_assert_eq(e2e_relay_stop(c, 30000), 0);
}

/* The pooler alone with the relays: each is handed the server session used
 * last, so nothing a running relay does would ever show it the sharing. */
Test(e2e, transaction_pooling_alone_is_refused_at_start, .fini = fini, .timeout = 300)
{
    two_relays_are_refused("transaction", 4, false, NULL);
}

Test(e2e, transaction_pooling_with_one_server_connection_is_refused, .fini = fini, .timeout = 300)
{
    two_relays_are_refused("transaction", 1, true, NULL);
}

/* Whichever server sessions the other clients leave idle, statement pooling
 * refuses a transaction block: the probe's one check that no timing can
 * pass, and the one each relay must have refused on. */
Test(e2e, statement_pooling_is_refused, .fini = fini, .timeout = 300)
{
    two_relays_are_refused("statement", 4, true, "transaction block");
}

Test(e2e, session_pooling_works, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "sessionpool");
    e2e_migrate(&T);
    enqueue(1, ROWS);
    bouncer_start("session", 4);

    const char *extra[] = {"relay.poll_interval_ms=100", pooled_conninfo(), NULL};
    struct e2e_relay *a = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(a, "msg=\"became leader\"", 30000),
              "a relay through session pooling did not lead (log %s)", a->log_path);
    struct e2e_relay *b = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(b, "msg=\"standing by\"", 30000),
              "the second relay did not stand by (log %s)", b->log_path);
    e2e_wait_all_sent(&T, 120000);
    enqueue(ROWS + 1, ROWS + 100);
    e2e_wait_all_sent(&T, 60000);
    for (int i = 0; i < 2; i++) {
        struct e2e_relay *r = i == 0 ? a : b;
        cr_assert(!e2e_relay_log_contains(r, "msg=\"refusing to relay\""),
                  "session pooling was refused (log %s)", r->log_path);
        cr_assert(e2e_relay_log_contains(r, "msg=\"connected through a pooler or proxy"),
                  "the proxy went unnoticed (log %s)", r->log_path);
        e2e_assert_readyz(r, 200, "[+]database ok");
    }
    cr_assert(!e2e_relay_log_contains(b, "msg=\"became leader\""), "both relays led");
    assert_exactly_once("two relays through session pooling");

    /* The leader's client goes: PgBouncer resets its server session (DISCARD
     * ALL releases advisory locks) and the standby takes over. */
    cr_assert_eq(e2e_relay_stop(a, 30000), 0);
    cr_assert(e2e_relay_wait_log(b, "msg=\"became leader\"", 30000),
              "the standby did not take over through session pooling (log %s)", b->log_path);
    cr_assert_eq(e2e_relay_stop(b, 30000), 0);
}

Test(e2e, a_standby_names_the_pooled_session_that_kept_the_lock, .fini = fini, .timeout = 300)
{
    e2e_setup(&T, "stalelock");
    e2e_migrate(&T);
    enqueue(1, 100);
    bouncer_start("transaction", 1);

    /* A client takes the lock through the pooler and leaves; in transaction
     * mode PgBouncer does not reset the server session, which keeps the lock. */
    char ci[512];
    e2e_pgbouncer_conninfo(&bouncer, "application_name=outbox-relay", ci, sizeof ci);
    PGconn *pooled = PQconnectdb(ci);
    cr_assert_eq(PQstatus(pooled), CONNECTION_OK, "%s", PQerrorMessage(pooled));
    long long holder = e2e_query_int(pooled, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(%s)) AS l",
                                     lock_key_sql());
    PQfinish(pooled);
    cr_assert_eq(lock_holders(), 1, "the pooled server session did not keep the lock");

    const char *extra[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(r, "msg=\"standing by\"", 30000), "no standby (log %s)", r->log_path);

    /* /status names the holder at once. */
    int64_t deadline = e2e_now_ms() + 20000;
    cJSON *h = NULL, *doc = NULL;
    while (e2e_now_ms() < deadline) {
        doc = status_doc(r);
        h = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "leader_lock"), "holder");
        if (cJSON_IsObject(h))
            break;
        cJSON_Delete(doc);
        doc = NULL;
        e2e_sleep_ms(200);
    }
    cr_assert(cJSON_IsObject(h), "/status never named the lock holder");
    cr_assert_eq((long long)cJSON_GetObjectItem(h, "pid")->valuedouble, holder);
    cr_assert_str_eq(cJSON_GetObjectItem(h, "client_addr")->valuestring, "127.0.0.1");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(h, "backend_start")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(h, "application_name")));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(h, "idle_seconds")));
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "role")->valuestring, "standby");
    cJSON_Delete(doc);

    /* A standby is ready, until it has waited long behind a session that
     * runs nothing, as no live relay does: then readiness names it. */
    e2e_assert_readyz(r, 200, "[+]role ok");
    char needle[160];
    snprintf(needle, sizeof(needle), "pg_terminate_backend(%lld)", holder);
    deadline = e2e_now_ms() + 60000;
    char *body = NULL;
    int code = 0;
    while (e2e_now_ms() < deadline) {
        free(body);
        code = e2e_relay_http_get(r, "/readyz?verbose", &body);
        if (code == 503)
            break;
        e2e_sleep_ms(1000);
    }
    cr_assert_eq(code, 503, "a standby stuck behind an idle holder stayed ready:\n%s", body);
    fprintf(stderr, "e2e: readiness of the stuck standby:\n%s\n", body);
    cr_assert(strstr(body, "[-]role standby for "), "%s", body);
    cr_assert(strstr(body, "has run no statement"), "%s", body);
    cr_assert(strstr(body, needle), "%s", body);
    free(body);
    doc = status_doc(r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "leader_lock"), "standby_stuck")));
    cJSON_Delete(doc);
    cr_assert(e2e_relay_log_contains(r, "msg=\"standing by behind a leader lock holder that does not look like a relay\""));

    /* The operator ends that session: the standby leads and relays. */
    e2e_exec(T.conn, "SELECT pg_terminate_backend(%lld)", holder);
    cr_assert(e2e_relay_wait_log(r, "msg=\"became leader\"", 30000), "no takeover (log %s)", r->log_path);
    e2e_wait_all_sent(&T, 60000);
    e2e_assert_readyz(r, 200, "[+]role ok");
    /* Its own session is named for what it is: other standbys judge by that name. */
    doc = status_doc(r);
    long long pid = (long long)cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "postgres"),
                                                   "backend_pid")->valuedouble;
    cJSON_Delete(doc);
    cr_assert(e2e_wait_sql(&T, 5000,
                           "SELECT application_name = 'outbox-relay' FROM pg_stat_activity "
                           "WHERE pid = %lld", pid),
              "the relay's session %lld is not named outbox-relay", pid);
    assert_exactly_once("standby after a stale pooled lock");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}
