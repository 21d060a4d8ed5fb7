/* relay_step.c — the relay described to the engine and its answer carried
 * out: one statement or producer call at a time (plan_next, plan_fence);
 * the capture mode's part of both through its interface; systemd's status. */
#include "daemon/relay_int.h"

/* ---- systemd ---------------------------------------------- */

void relay_notify_status(struct relay *r)
{
    char buf[256];
    /* systemctl status shows it: "starting" says more there than "unknown". */
    const char *role =
        r->st.role == STATS_ROLE_UNKNOWN ? "starting" : health_role_name(r->st.role);
    if (r->st.halted)
        role = "halted";
    if (r->st.refused) {
        snprintf(buf, sizeof(buf), "STATUS=refused: %.230s", r->st.refused_reason);
        notify_send(buf);
        return;
    }
    snprintf(buf, sizeof(buf), "STATUS=%s; postgres %s; backlog %" PRId64 "; published %" PRIu64,
             role, r->st.pg_up ? "up" : "down", r->st.backlog_known ? r->st.backlog_rows : -1,
             r->st.published_total);
    notify_send(buf);
}

/* ---- the decision ------------------------------------------------------ */

/* The relay as plan_next sees it. */
void relay_snapshot(const struct relay *r, struct plan_state *s)
{
    const struct producer *p = &r->prod;
    *s = (struct plan_state){
        .now_ms = uv_now(r->loop),
        .pg_ready = pg_ready(&r->pg),
        .backoff = r->backoff,
        .session_checked = r->session_checked,
        .schema_checked = r->schema_checked,
        .quiet = r->quiet,
        .quiet_wanted = r->quiet_wanted,
        .notifies = r->notifies,
        .quiet_idle = r->quiet_idle,
        .quiet_check_at_ms = r->quiet_check_at_ms,
        .role = r->st.role,
        .lock_due = r->lock_due,
        .holder_due = r->holder_due,
        .ready_sent = r->ready_sent,
        .refused = r->st.refused,
        .refuse_deadline_ms = r->refuse_deadline_ms,
        .stopping = r->stopping,
        .halted = r->st.halted,
        .retention_due = r->retention_due,
        .row_security = r->st.row_security,
        .producer_fatal = producer_fatal(p) || r->renew_producer || r->producer_down,
        .producer_refused = producer_is_refused(p),
        .producer_down = r->producer_down,
        .connect_refused = kafka_denial_at_connect(r->st.kafka_denial),
        .producer_retry_at_ms = r->producer_retry_at_ms,
        .txn = producer_txn_state(p),
        .txn_doomed = producer_txn_doomed(p),
        .txn_empty = producer_txn_empty(p),
        .txn_gen = producer_txn_gen(p),
        .lead_unverified = r->lead_unverified,
    };
    r->ops->status(r, s); /* what the plan needs of the capture mode */
}

/* Carries out @p p. @return true when the relay is to be planned again (what
 * was done sent no statement and decided nothing else). */
static bool carry_out(struct relay *r, const struct plan_step *p)
{
    int mine = r->ops->act(r, p); /* the capture mode's own steps */
    if (mine >= 0)
        return mine > 0;
    switch (p->act) {
    case PLAN_FINISH: relay_finish(r); break;
    case PLAN_CHECK_SESSION: relay_session_check(r); break;
    case PLAN_WIND_DOWN: relay_wind_down(r); break;
    case PLAN_CHECK_SCHEMA: relay_schema_check(r); break;
    /* Fails (and backs off) when no new instance can be made. */
    case PLAN_REPLACE_PRODUCER: return relay_replace_producer(r);
    case PLAN_STOP_PRODUCER: return relay_stop_producer(r);
    case PLAN_TAKE_LOCK:
        r->lock_due = false;
        relay_lock_query(r, r->ssql.lock, relay_on_lock);
        break;
    case PLAN_VERIFY_LOCK:
        r->lock_due = false;
        relay_lock_query(r, r->ssql.verify, relay_on_verified);
        break;
    case PLAN_ASK_HOLDER:
        r->holder_due = false;
        pg_query(&r->pg, r->ssql.holder, 0, NULL, relay_on_holder, r);
        break;
    case PLAN_READY:
        r->ready_sent = true;
        notify_send("READY=1");
        return true;
    case PLAN_TAKE_QUIET: pg_query(&r->pg, r->ssql.quiet_on, 0, NULL, relay_on_quiet_on, r); break;
    case PLAN_RELEASE_QUIET: pg_query(&r->pg, r->ssql.quiet_off, 0, NULL, relay_on_quiet_off, r); break;
    case PLAN_CHECK_QUIET:
        pg_query(&r->pg, r->ssql.quiet_check, 0, NULL, relay_on_quiet_check, r);
        break;
    default: break; /* PLAN_WAIT, and a mode's step the other mode never plans */
    }
    return false;
}

/* The one decision point, called after every event: the Kafka transaction's
 * needs first, then at most one statement (the connection runs one at a
 * time), as plan_next decides. */
void relay_step(struct relay *r)
{
    struct plan_state s;
    if (r->finished)
        return;
    relay_snapshot(r, &s);
    relay_fence_step(r, &s);
    struct plan_step p;
    do {
        relay_snapshot(r, &s); /* after what fence_step, or the step before, changed */
        p = plan_next(&s);
    } while (carry_out(r, &p) && !r->finished);
    r->ops->step(r);
}
