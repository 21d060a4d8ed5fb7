/* relay_capture_recover.c — relay.slot_recovery = reconcile: a failover left
 * the slot missing, or one made on the promoted server starts past what this
 * relay confirmed (core/failover_watch.c). The leader closes the gap before
 * anything streams from that server:
 *
 *   1. the slot is made if it is missing (migrate's statement): what commits
 *      from now on, the stream delivers;
 *   2. the table's rows from a safe lower bound on (failover_recovery_since)
 *      are matched against Kafka by event_id, as verify does, without a fence
 *      (nothing streams to pass one): the rows no message was seen for are the
 *      gap, whatever their place in it;
 *   3. those rows are published in id order (hence each aggregate's), as the
 *      relay writes them, with the same event ids, and acknowledged;
 *   4. only then the stream starts, from the slot.
 *
 * A row committed after the slot was made may be both published here and
 * streamed: a duplicate around the failover, never a loss. Steps 1-3 block
 * (libpq, a consumer, a producer): they run on libuv's thread pool, and only
 * their result comes back to the loop thread, which alone writes the stats. */
#include "daemon/relay_capture_int.h"

#include <stdatomic.h>
#include <time.h>

#include "cmd/pg_session.h"
#include "cmd/replay.h"
#include "cmd/verify.h"

/* A recovery that failed is tried again this much later (at the next slot query after it). */
#define RECOVERY_RETRY_MS 10000

struct capture_recovery {
    uv_work_t work;
    struct relay *r;            /* NULL once the capture is gone: the result is dropped */
    const struct relay_config *cfg;
    char since[40];             /* the rows read: created_at from here on */
    bool created;               /* the slot was made */
    size_t absent;              /* rows Kafka did not hold */
    uint64_t published;
    int rc;
    char err[512];
    atomic_int stop;
};

/* Step 1 on a session of its own, in a transaction of the statement's own
 * (PostgreSQL refuses to make a logical slot in one that has written). */
static int make_slot(struct capture_recovery *rec)
{
    const struct relay_config *cfg = rec->cfg;
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0) {
        snprintf(rec->err, sizeof rec->err, "cannot build the slot's statement");
        return -EINVAL;
    }
    PGconn *conn = pg_session_open(cfg, "slot recovery", rec->err, sizeof rec->err);
    int rc = conn ? 0 : -EHOSTUNREACH;
    if (conn) {
        const char *params[] = {cfg->slot};
        /* Remade on a promoted server, the slot is again one its standbys keep. */
        const char *create = cfg->slot_failover == RELAY_SLOT_FAILOVER_ON ? q.create_failover_slot
                                                                           : q.create_slot;
        PGresult *res = PQexecParams(conn, create, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
            rec->created = !PQgetisnull(res, 0, 0) && PQgetvalue(res, 0, 0)[0] != 'f';
        else {
            snprintf(rec->err, sizeof rec->err, "creating the slot: %s", PQresultErrorMessage(res));
            rc = -EIO;
        }
        PQclear(res);
        PQfinish(conn);
    }
    sql_capture_free(&q);
    return rc;
}

static void work(uv_work_t *w)
{
    struct capture_recovery *rec = w->data;
    rec->rc = make_slot(rec);
    if (rec->rc < 0)
        return;
    struct vcheck v;
    vcheck_init(&v, 0);
    v.want_absent = true;
    struct verify_opts o = {.w = {.since = rec->since}, .no_fence = true, .stop = &rec->stop};
    struct verify_meta meta;
    rec->rc = verify_run(rec->cfg, &o, &v, &meta, rec->err, sizeof rec->err);
    if (rec->rc == 0 && v.absent_oom) {
        snprintf(rec->err, sizeof rec->err, "out of memory listing the rows Kafka lacks");
        rec->rc = -ENOMEM;
    }
    rec->absent = v.n_absent;
    if (rec->rc == 0 && replay_ids(rec->cfg, v.absent, v.n_absent, &rec->published) != 0) {
        snprintf(rec->err, sizeof rec->err, "publishing the rows Kafka lacks failed (see the "
                                            "lines above)");
        rec->rc = -EIO;
    }
    vcheck_free(&v);
}

static void after(uv_work_t *w, int status)
{
    struct capture_recovery *rec = w->data;
    struct relay *r = rec->r;
    if (!r) {
        free(rec);
        return;
    }
    struct capture *c = r->cap;
    c->recovery = NULL;
    if (status == 0 && rec->rc == 0) {
        r->st.slot.recoveries_total++;
        r->st.slot.recovered_events_total += rec->published;
        failover_watch_recovered(&c->failover);
        capture_plan_new_slot(&c->plan);
        log_warn("postgres failover reconciled: the rows Kafka lacked are published; streaming "
                 "from the slot",
                 "slot=%s slot_created=%s since=%s rows_kafka_lacked=%zu published=%" PRIu64,
                 r->cfg->slot, rec->created ? "true" : "false", rec->since, rec->absent,
                 rec->published);
    } else {
        c->recover_at_ms = relay_now_ms(r) + RECOVERY_RETRY_MS;
        log_error("postgres failover: reconciling failed; tried again soon", "slot=%s since=%s "
                  "error=%s", r->cfg->slot, rec->since, log_quote(status ? uv_strerror(status)
                                                                          : rec->err));
    }
    free(rec);
    relay_step(r);
}

void relay_capture_recover(struct relay *r)
{
    struct capture *c = r->cap;
    if (!c->reconcile || !c->failover.blocked || c->recovery || r->stopping ||
        r->st.role != STATS_ROLE_LEADER || relay_now_ms(r) < c->recover_at_ms)
        return;
    struct capture_recovery *rec = calloc(1, sizeof *rec);
    if (!rec)
        return;
    rec->r = r;
    rec->cfg = r->cfg;
    rec->work.data = rec;
    time_t since = (time_t)failover_recovery_since(r->st.slot.last_commit_time, r->st.start_time);
    struct tm tm;
    gmtime_r(&since, &tm);
    strftime(rec->since, sizeof rec->since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (uv_queue_work(r->loop, &rec->work, work, after) < 0) {
        free(rec);
        return;
    }
    c->recovery = rec;
    snprintf(r->st.slot.problem, sizeof r->st.slot.problem,
             "failover: reconciling (relay.slot_recovery = reconcile): the slot made if missing, "
             "the rows created since %s that Kafka lacks published; the stream starts after",
             rec->since);
    log_warn("postgres failover: reconciling (relay.slot_recovery = reconcile): the slot made if "
             "missing, the rows Kafka lacks published, then the stream",
             "slot=%s since=%s", r->cfg->slot, rec->since);
}

void relay_capture_recover_drop(struct relay *r)
{
    struct capture *c = r->cap;
    if (!c || !c->recovery)
        return;
    atomic_store(&c->recovery->stop, 1);
    c->recovery->r = NULL;
    c->recovery = NULL;
}
