/* relay_step.c — the relay described to the engine and its answer carried
 * out: one statement or producer call at a time (plan_next, plan_fence);
 * the hot statements prepared per connection; the backlog count and systemd's status. */
#include "daemon/relay_int.h"

/* ---- backlog and systemd ---------------------------------------------- */

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

static void on_backlog(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    r->backlog_took_ms = relay_now_ms(r) - r->backlog_sent_ms;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        r->st.backlog_known = true;
        r->st.backlog_rows = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        r->st.oldest_unsent_age = strtod(PQgetvalue(res, 0, 1), NULL);
        r->st.dead_rows = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        r->st.backlog_time = stats_now();
        r->st.backlog_published = r->st.published_total;
    } else {
        log_warn("backlog query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
    }
    relay_notify_status(r);
    relay_step(r);
}

/* With SQL_FLOOR the count starts from the relay's floor and saves it. */
static void relay_backlog_query(struct relay *r)
{
    if (!r->floor_mode) {
        pg_query(&r->pg, r->sql.backlog, 0, NULL, on_backlog, r);
        return;
    }
    char floor_id[24];
    const char *params[4];
    relay_floor_params(r, floor_id, params);
    pg_query(&r->pg, r->sql.backlog, 4, params, on_backlog, r);
}


/* ---- the decision ------------------------------------------------------ */

/* The statements of the hot path are parsed and planned once per
 * connection, not once per batch. */
static const struct {
    const char *name;
    size_t offset;
    int nparams;
} hot_statements[] = {
    { "claim", offsetof(struct sql_statements, claim), -1 }, /* sql.claim_nparams */
    { "mark", offsetof(struct sql_statements, mark_sent), 1 },
};
#define N_HOT (int)(sizeof(hot_statements) / sizeof(hot_statements[0]))

static void on_prepared(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("preparing a statement failed", "statement=%s error=%s",
                  hot_statements[r->prepared].name, log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, hot_statements[r->prepared].name);
        r->backoff = true;
        return;
    }
    r->prepared++;
    relay_step(r);
}

static void prepare(struct relay *r, int i)
{
    const char *sql = *(char *const *)((const char *)&r->sql + hot_statements[i].offset);
    int nparams = hot_statements[i].nparams;
    if (nparams < 0) /* decided with the statement's text */
        nparams = r->sql.claim_nparams;
    pg_prepare(&r->pg, hot_statements[i].name, sql, nparams, on_prepared, r);
}

/* The relay as plan_next sees it. */
void relay_snapshot(const struct relay *r, struct plan_state *s)
{
    const struct producer *p = &r->prod;
    *s = (struct plan_state){
        .now_ms = uv_now(r->loop),
        .pg_ready = pg_ready(&r->pg),
        .backoff = r->backoff,
        .session_checked = r->session_checked,
        .n_hot = N_HOT,
        .schema_checked = r->schema_checked,
        .prepared = r->prepared,
        .listening = r->listening,
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
        .wake = r->wake,
        .claim_full = r->claim_full,
        .halted = r->st.halted,
        .halt_pending = r->halt_pending,
        .queue_full = r->queue_full,
        .isolating = r->isolating,
        .isolate_until_id = r->isolate_until_id,
        .truncations = r->truncations,
        .batch_size = r->cfg->batch_size,
        .retention_due = r->retention_due,
        .backlog_due_ms = r->backlog_due_ms,
        .backlog_took_ms = r->backlog_took_ms,
        .row_security = r->st.row_security,
        .claim_first = r->claim_first,
        .claim_first_until = r->claim_first_until,
        .producer_fatal = producer_fatal(p),
        .producer_retry_at_ms = r->producer_retry_at_ms,
        .txn = producer_txn_state(p),
        .txn_doomed = producer_txn_doomed(p),
        .txn_empty = producer_txn_empty(p),
        .txn_gen = producer_txn_gen(p),
        .lead_unverified = r->lead_unverified,
        .b = r->b,
        .n_batches = N_BATCHES,
    };
    relay_capture_status(r, s); /* relay.capture = wal: what the plan needs of it */
}

/* Carries out @p p. @return true when the relay is to be planned again (what
 * was done sent no statement and decided nothing else). */
static bool carry_out(struct relay *r, const struct plan_step *p)
{
    if (p->queue_drained)
        r->queue_full = false;
    switch (p->act) {
    case PLAN_WAIT: break;
    case PLAN_FINISH: relay_finish(r); break;
    case PLAN_CHECK_SESSION: relay_session_check(r); break;
    case PLAN_WIND_DOWN: relay_wind_down(r); break;
    case PLAN_CHECK_SCHEMA: relay_schema_check(r); break;
    case PLAN_PREPARE: prepare(r, p->index); break;
    case PLAN_MARK: relay_mark(r, &r->b[p->slot], p->with); break;
    /* Fails (and backs off) when no new instance can be made. */
    case PLAN_REPLACE_PRODUCER: return relay_replace_producer(r);
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
    case PLAN_COUNT_BACKLOG:
        r->backlog_due_ms = p->at_ms;
        r->backlog_sent_ms = relay_now_ms(r);
        relay_backlog_query(r);
        break;
    case PLAN_LISTEN: pg_query(&r->pg, r->sql.listen, 0, NULL, relay_on_listen, r); break;
    case PLAN_TAKE_QUIET: pg_query(&r->pg, r->ssql.quiet_on, 0, NULL, relay_on_quiet_on, r); break;
    case PLAN_RELEASE_QUIET: pg_query(&r->pg, r->ssql.quiet_off, 0, NULL, relay_on_quiet_off, r); break;
    case PLAN_CHECK_QUIET:
        pg_query(&r->pg, r->ssql.quiet_check, 0, NULL, relay_on_quiet_check, r);
        break;
    case PLAN_CLAIM: relay_claim(r, p); break;
    case PLAN_RETENTION:
        if (r->cap)
            relay_capture_act(r, p->act);
        else
            relay_retention(r);
        break;
    case PLAN_HEARTBEAT:
    case PLAN_SLOT_QUERY:
    case PLAN_SLOT_TAKE_OVER:
    case PLAN_RECORD_DEAD: relay_capture_act(r, p->act); break;
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
    relay_capture_step(r);
}
