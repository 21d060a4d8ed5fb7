/* failover.c — what the failover tests share (see testlib.h): writers that
 * go on committing through a failover of the test's pair (pg_pair.c), and
 * the failover itself. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define UNANSWERED_MAX 8

struct writer {
    pthread_t th;
    int id;
    bool started;
    struct e2e_writers *set;
    atomic_long committed;
    atomic_long unanswered[UNANSWERED_MAX]; /* the seq of each commit that got no answer */
    atomic_int n_unanswered;
};

struct e2e_writers {
    char conninfo[512];
    char qenqueue[96];
    atomic_bool stop;
    bool joined;
    struct writer w[E2E_WRITERS];
};

/* The running test's writers: e2e_unmatched_ok has no context of its own. */
static struct e2e_writers *current;

/* ---- the failover -------------------------------------------------------- */

struct e2e_failover e2e_pg_pair_failover(struct e2e_ctx *t, struct e2e_pg_pair *p, bool clean,
                                         struct e2e_writers *ws)
{
    struct e2e_failover f = {0};
    PQfinish(t->conn);
    t->conn = NULL;
    f.stopping_us = e2e_wall_us();
    if (clean)
        e2e_pg_pair_stop_primary_fast(p);
    else
        e2e_pg_pair_stop_primary(p);
    f.stopped_us = e2e_wall_us();
    f.committed_at_stop = ws ? e2e_writers_committed(ws) : 0;
    e2e_pg_pair_promote(p);
    f.promoted_ms = e2e_now_ms();
    fprintf(stderr, "e2e: primary stopped (%s) after %ld commits; standby promoted\n",
            clean ? "fast" : "immediate", f.committed_at_stop);
    e2e_pg_pair_use(t, p, E2E_PAIR_STANDBY);
    return f;
}

/* ---- writers: one aggregate each, one row per transaction, through the
 * two-host conninfo; a lost connection is made again and writing goes on. */

/* A primary stopped at once loses the transactions it committed locally but
 * whose commit its writers never heard of (the synchronous standby had not
 * confirmed them). Its walsender and its other sessions could see them all
 * the same, so their events may be in Kafka: a message that matches no row
 * of the promoted server is accepted only for a commit that got no answer. */
static bool unanswered_commit(const struct e2e_msg *m)
{
    int wid;
    long seq;
    if (!current || !m->key || sscanf(m->key, "w%d", &wid) != 1 || wid < 0 || wid >= E2E_WRITERS ||
        !m->value || sscanf(m->value, "{\"i\": %ld}", &seq) != 1)
        return false;
    const struct writer *w = &current->w[wid];
    for (int i = 0; i < atomic_load(&w->n_unanswered) && i < UNANSWERED_MAX; i++)
        if (atomic_load(&w->unanswered[i]) == seq)
            return true;
    return false;
}

static PGconn *writer_connect(struct e2e_writers *set)
{
    while (!atomic_load(&set->stop)) {
        PGconn *c = PQconnectdb(set->conninfo);
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
    struct e2e_writers *set = w->set;
    char sql[512];
    PGconn *c = writer_connect(set);
    for (long seq = 1; c && !atomic_load(&set->stop); seq++) {
        snprintf(sql, sizeof sql,
                 "SELECT %s('order', 'w%d', 'created', jsonb_build_object('i', %ld))", set->qenqueue,
                 w->id, seq);
        PGresult *res = PQexec(c, sql);
        bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
        PQclear(res);
        if (ok) {
            atomic_fetch_add(&w->committed, 1);
            continue;
        }
        int k = atomic_load(&w->n_unanswered);
        if (k < UNANSWERED_MAX) {
            atomic_store(&w->unanswered[k], seq);
            atomic_store(&w->n_unanswered, k + 1);
        }
        PQfinish(c);
        c = writer_connect(set);
    }
    PQfinish(c);
    return NULL;
}

long e2e_writers_committed(struct e2e_writers *ws)
{
    long n = 0;
    for (int i = 0; i < E2E_WRITERS; i++)
        n += atomic_load(&ws->w[i].committed);
    return n;
}

void e2e_writers_wait(struct e2e_writers *ws, long target, struct e2e_relay *r)
{
    int64_t deadline = e2e_now_ms() + 60000;
    while (e2e_writers_committed(ws) < target && e2e_now_ms() < deadline) {
        if (r)
            cr_assert(e2e_relay_alive(r), "the relay exited (log %s)", r->log_path);
        e2e_sleep_ms(20);
    }
    cr_assert_geq(e2e_writers_committed(ws), target, "the writers committed only %ld rows",
                  e2e_writers_committed(ws));
}

struct e2e_writers *e2e_writers_start(struct e2e_ctx *t, long first, struct e2e_relay *r)
{
    struct e2e_writers *ws = calloc(1, sizeof *ws);
    cr_assert_not_null(ws);
    snprintf(ws->conninfo, sizeof ws->conninfo, "%s", t->pg_conninfo);
    snprintf(ws->qenqueue, sizeof ws->qenqueue, "%s", t->qenqueue);
    atomic_init(&ws->stop, false);
    current = ws;
    e2e_unmatched_ok = unanswered_commit;
    for (int i = 0; i < E2E_WRITERS; i++) {
        struct writer *w = &ws->w[i];
        w->id = i;
        w->set = ws;
        atomic_init(&w->committed, 0);
        atomic_init(&w->n_unanswered, 0);
        cr_assert_eq(pthread_create(&w->th, NULL, writer_main, w), 0);
        w->started = true;
    }
    e2e_writers_wait(ws, first, r);
    return ws;
}

long e2e_writers_stop(struct e2e_writers *ws)
{
    atomic_store(&ws->stop, true);
    for (int i = 0; i < E2E_WRITERS && !ws->joined; i++)
        if (ws->w[i].started)
            pthread_join(ws->w[i].th, NULL);
    ws->joined = true;
    long n = e2e_writers_committed(ws);
    fprintf(stderr, "e2e: %ld commits in all\n", n);
    return n;
}

void e2e_writers_free(struct e2e_writers *ws)
{
    if (!ws)
        return;
    /* A test that failed midway left them running: they end before the pair does. */
    if (!ws->joined)
        e2e_writers_stop(ws);
    if (current == ws) {
        current = NULL;
        e2e_unmatched_ok = NULL;
    }
    free(ws);
}
