/* relay_capture_recover.c — relay.slot_recovery = reconcile: a failover left
 * the slot missing, or one made on the promoted server starts past what this
 * relay confirmed (core/failover_watch.c). The leader closes the gap before
 * anything streams from that server (cmd/reconcile.h: the slot made if
 * missing, the rows Kafka lacks published), then the stream starts; when, and
 * what its end changes, is core/capture_recover.c's. That blocks: it runs on
 * libuv's thread pool, and only its result comes back to the loop thread,
 * which alone writes the stats. */
#include "daemon/relay_capture_int.h"

#include "cmd/reconcile.h"

struct capture_recovery {
    uv_work_t work;
    struct relay *r;            /* NULL once the capture is gone: the result is dropped */
    const struct relay_config *cfg;
    char since[40];
    struct reconcile_gap gap;
    int rc;
    char err[512];
    atomic_int stop;
};

static void work(uv_work_t *w)
{
    struct capture_recovery *rec = w->data;
    rec->rc = reconcile_gap_run(rec->cfg, &rec->gap, rec->err, sizeof rec->err);
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
        capture_recover_done(&r->st.slot, &c->failover, &c->plan, rec->gap.published, stats_now());
        log_warn("postgres failover reconciled: the rows Kafka lacked are published; streaming "
                 "from the slot",
                 "slot=%s slot_created=%s table_read=%s since=%s rows_kafka_lacked=%zu "
                 "published=%" PRIu64, r->cfg->slot, rec->gap.created ? "true" : "false",
                 rec->gap.table_read, rec->since, rec->gap.absent, rec->gap.published);
    } else {
        capture_recover_failed(&c->rec, relay_now_ms(r));
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
    if (!capture_recover_due(&c->rec, &c->failover, r->st.role == STATS_ROLE_LEADER && !r->stopping,
                             c->recovery != NULL, relay_now_ms(r)))
        return;
    struct capture_recovery *rec = calloc(1, sizeof *rec);
    if (!rec)
        return;
    rec->r = r;
    rec->cfg = r->cfg;
    rec->work.data = rec;
    capture_recover_since(r->st.slot.last_commit_time, r->st.start_time, rec->since,
                          sizeof rec->since);
    rec->gap = (struct reconcile_gap){.since = rec->since, .stop = &rec->stop};
    if (uv_queue_work(r->loop, &rec->work, work, after) < 0) {
        free(rec);
        return;
    }
    c->recovery = rec;
    capture_recover_problem(rec->since, r->st.slot.problem, sizeof r->st.slot.problem);
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
