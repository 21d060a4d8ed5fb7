/* test_chaos.c — everything at once, bounded in time.
 *
 * A writer thread commits events continuously over many aggregates while the
 * test SIGKILLs the relay three times (starting a new one each time), restarts
 * PostgreSQL once, takes every broker down for a while once (the mock's
 * brokers, or a real one SIGKILLed and restarted) and makes produce requests
 * fail with retriable errors (on a real broker: hangs it for 4 s). Then it waits until every row is
 * marked, reads everything back and asserts: nothing lost, duplicates only of
 * rows that were unmarked at a kill, per-aggregate order of first deliveries,
 * every row marked. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define AGGREGATES 300
#define CHAOS_MS 90000          /* the writer runs this long */
#define DRAIN_MS 120000         /* then every row must be marked within this */

static struct e2e_ctx T;

static void fini(void)
{
    if (T.env) {
        e2e_mock_command(&T, "up -1");
        e2e_mock_command(&T, "clear");
        e2e_kafka_node(&T, "resume", 1);
        e2e_kafka_node(&T, "restart", 1);
    }
    e2e_teardown(&T);
}

/* ---- the writer ----------------------------------------------------------- */

struct writer {
    pthread_t thread;
    atomic_bool stop;
    atomic_long confirmed;      /* rows whose statement returned success */
    atomic_long failed;         /* statements that failed (connection lost, restart) */
    char conninfo[1024];
    char qenqueue[128];
};

/* One statement = one transaction of 1..6 events of random aggregates. An
 * aggregate always has the same type, so its events share a topic and key.
 * A single writer commits in id order, so per aggregate, id order is the
 * order the events happened in. */
static void *writer_main(void *arg)
{
    struct writer *w = arg;
    unsigned seed = 12345;
    long seq = 0;
    PGconn *c = NULL;
    while (!atomic_load(&w->stop)) {
        if (!c || PQstatus(c) != CONNECTION_OK) {
            if (c)
                PQfinish(c);
            c = PQconnectdb(w->conninfo);
            if (PQstatus(c) != CONNECTION_OK) {
                e2e_sleep_ms(100); /* PostgreSQL restarting */
                continue;
            }
        }
        int n = 1 + (int)(rand_r(&seed) % 6);
        char values[512];
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            int agg = (int)(rand_r(&seed) % AGGREGATES);
            o += (size_t)snprintf(values + o, sizeof(values) - o, "%s(%d, %ld)", i ? "," : "", agg, ++seq);
        }
        char sql[1024];
        snprintf(sql, sizeof(sql),
                 "SELECT count(%s((ARRAY['order','customer','payment'])[1 + v.a %% 3], 'agg-' || v.a, "
                 "'happened', jsonb_build_object('seq', v.s))) FROM (VALUES %s) AS v(a, s)",
                 w->qenqueue, values);
        PGresult *res = PQexec(c, sql);
        if (PQresultStatus(res) == PGRES_TUPLES_OK)
            atomic_fetch_add(&w->confirmed, n);
        else
            atomic_fetch_add(&w->failed, 1);
        PQclear(res);
        e2e_sleep_ms(10);
    }
    if (c)
        PQfinish(c);
    return NULL;
}

/* ---- what was unmarked at each kill --------------------------------------- */

struct idset {
    long long *v;
    size_t n, cap;
};

static void idset_add_unmarked(struct idset *s)
{
    /* The relay is dead: its in-flight rows are those not marked now. A mark
     * still running in a backend only shrinks the marked set, which makes the
     * duplicate check looser, never stricter. */
    PGresult *res = e2e_query(T.conn, "SELECT id FROM %s WHERE sent_at IS NULL ORDER BY id", T.qtable);
    size_t n = (size_t)PQntuples(res);
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2 + 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        cr_assert(s->v);
    }
    for (size_t i = 0; i < n; i++)
        s->v[s->n++] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
    PQclear(res);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static bool idset_has(const struct idset *s, long long id)
{
    return bsearch(&id, s->v, s->n, sizeof(*s->v), cmp_ll) != NULL;
}

/* ---- the test -------------------------------------------------------------- */

static const char *const relay_opts[] = {"relay.poll_interval_ms=100", "relay.batch_size=500",
                                         "relay.reconnect_interval_ms=200", "relay.reconnect_max_ms=2000",
                                         NULL};

static struct e2e_relay *kill_and_restart(struct e2e_relay *r, struct idset *unmarked, int *kills)
{
    cr_assert(e2e_relay_alive(r), "relay died before kill %d (log %s)", *kills + 1, r->log_path);
    e2e_relay_kill(r);
    (*kills)++;
    size_t before = unmarked->n;
    idset_add_unmarked(unmarked);
    fprintf(stderr, "e2e: chaos: kill %d with %zu rows unmarked\n", *kills, unmarked->n - before);
    return e2e_relay_start(&T, relay_opts);
}

/* Sleeps until @p at ms after @p t0, failing early if the relay died. */
static void until(int64_t t0, int at, struct e2e_relay *r)
{
    while (e2e_now_ms() - t0 < at) {
        cr_assert(e2e_relay_alive(r), "relay exited unexpectedly (log %s)", r->log_path);
        e2e_sleep_ms(100);
    }
}

Test(e2e, chaos, .fini = fini, .timeout = 290)
{
    e2e_setup(&T, "chaos");
    bool mock = T.env->mock_control != NULL;
    if ((!mock && !T.env->kafka_dir) || !T.env->stack_sh || !T.env->stack_dir)
        cr_skip_test("needs the stack script and a broker it controls (the mock, or its own Kafka node)");
    e2e_migrate(&T);

    struct writer w;
    memset(&w, 0, sizeof(w));
    snprintf(w.conninfo, sizeof(w.conninfo), "%s", T.env->pg);
    snprintf(w.qenqueue, sizeof(w.qenqueue), "%s", T.qenqueue);
    struct idset unmarked = {0};
    int kills = 0;

    struct e2e_relay *relay = e2e_relay_start(&T, relay_opts);
    int64_t t0 = e2e_now_ms();
    cr_assert_eq(pthread_create(&w.thread, NULL, writer_main, &w), 0, "cannot start the writer");

    until(t0, 10000, relay);
    relay = kill_and_restart(relay, &unmarked, &kills);

    until(t0, 20000, relay);
    if (mock) {
        /* Retriable produce errors, mixed; librdkafka retries them itself. */
        char cmd[1024] = "errors Produce 30";
        static const char *const errs[] = {"NOT_ENOUGH_REPLICAS", "REQUEST_TIMED_OUT", "NOT_LEADER_FOR_PARTITION"};
        for (int i = 0; i < 30; i++)
            snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", errs[i % 3]);
        cr_assert(e2e_mock_command(&T, "%s", cmd));
    } else {
        /* A real broker cannot be told to fail requests: it hangs for 4 s instead. */
        fprintf(stderr, "e2e: chaos: broker hung for 4 s\n");
        cr_assert(e2e_kafka_node(&T, "pause", 1));
        e2e_sleep_ms(4000);
        cr_assert(e2e_kafka_node(&T, "resume", 1));
    }

    until(t0, 30000, relay);
    fprintf(stderr, "e2e: chaos: restarting PostgreSQL\n");
    e2e_pg_restart(&T);

    until(t0, 50000, relay);
    fprintf(stderr, "e2e: chaos: all brokers down for 10 s\n");
    cr_assert(mock ? e2e_mock_command(&T, "down -1") : e2e_kafka_node(&T, "kill", 1));
    /* Killed during the outage: a whole batch is produced but unacknowledged. */
    until(t0, 56000, relay);
    relay = kill_and_restart(relay, &unmarked, &kills);
    until(t0, 60000, relay);
    cr_assert(mock ? e2e_mock_command(&T, "up -1") : e2e_kafka_node(&T, "restart", 1));

    until(t0, 75000, relay);
    relay = kill_and_restart(relay, &unmarked, &kills);

    until(t0, CHAOS_MS, relay);
    atomic_store(&w.stop, true);
    pthread_join(w.thread, NULL);
    e2e_mock_command(&T, "clear");
    fprintf(stderr, "e2e: chaos: writer stopped: %ld rows confirmed, %ld statements failed\n",
            atomic_load(&w.confirmed), atomic_load(&w.failed));

    e2e_wait_all_sent(&T, DRAIN_MS);
    qsort(unmarked.v, unmarked.n, sizeof(*unmarked.v), cmp_ll);

    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep = {0};
    e2e_read_back(&T, 120000, &rows, &msgs, &rep); /* content and per-aggregate order of first deliveries */
    size_t lost = 0, dups = 0, bad_dups = 0, unsent = 0;
    for (size_t i = 0; i < rows.n; i++) {
        const struct e2e_row *r = &rows.v[i];
        bool in_flight = idset_has(&unmarked, (long long)r->id);
        lost += r->deliveries == 0;
        dups += r->deliveries > 1;
        bad_dups += r->deliveries > 1 && !in_flight;
        unsent += !r->sent;
        e2e_check(&rep, r->deliveries >= 1, "row %lld lost", (long long)r->id);
        e2e_check(&rep, r->deliveries <= 1 || in_flight,
                  "row %lld published %d times although it was marked at every kill (or written after "
                  "the last one)", (long long)r->id, r->deliveries);
        e2e_check(&rep, r->sent, "row %lld has sent_at NULL", (long long)r->id);
    }
    long long dead = e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE dead_at IS NOT NULL", T.qtable);
    long long attempts = e2e_query_int(T.conn, "SELECT coalesce(sum(attempts), 0) FROM %s", T.qtable);
    e2e_check(&rep, dead == 0, "%lld rows dead-lettered, though none is poison", dead);
    e2e_check(&rep, (long)rows.n >= atomic_load(&w.confirmed),
              "%zu rows in the table but the writer had %ld confirmed", rows.n, atomic_load(&w.confirmed));
    fprintf(stderr,
            "e2e: chaos: rows committed %zu (writer confirmed %ld), rows in Kafka %zu (messages), lost %zu, "
            "duplicates %zu (%zu of them not in flight at a kill; %zu rows were unmarked at some kill), "
            "unmarked %zu, dead %lld, attempts %lld, kills %d\n",
            rows.n, atomic_load(&w.confirmed), msgs.n, lost, dups, bad_dups, unmarked.n, unsent, dead, attempts,
            kills);
    e2e_check(&rep, rows.n > 5000, "only %zu rows written: the writer did not keep up the load", rows.n);
    e2e_report_assert(&rep, "chaos");

    cr_assert(e2e_relay_log_contains(relay, "msg=\"became leader\""), "the last relay never led");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "the last relay did not exit 0 on SIGTERM");
    free(unmarked.v);
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}
