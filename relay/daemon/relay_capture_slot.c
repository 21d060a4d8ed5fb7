/* relay_capture_slot.c — relay.capture = wal: what the main connection does
 * for the capture, through the plan: the slot as pg_replication_slots shows
 * it (every few seconds, for every role), the heartbeat that keeps an idle
 * slot moving, ending a deposed leader's walsender, and retention of the rows
 * the relay only reads. */
#include "daemon/relay_capture_int.h"

/* ---- what the main connection does for the capture ------------------------ */

static void on_heartbeat(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_warn("heartbeat failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, "heartbeat");
    } else {
        r->st.slot.heartbeats_total++;
    }
    relay_step(r);
}

void relay_capture_heartbeat(struct relay *r)
{
    const char *params[] = { SQL_CAPTURE_HEARTBEAT_PREFIX };
    capture_plan_heartbeat_sent(&r->cap->plan, relay_now_ms(r));
    pg_query(&r->pg, r->cap->sql.heartbeat, 1, params, on_heartbeat, r);
}

static void on_slot(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    struct stats_slot *s = &r->st.slot;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_warn("slot query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        relay_step(r);
        return;
    }
    const char *v[SLOT_NCOLS];
    for (int k = 0; k < SLOT_NCOLS && k < PQnfields(res); k++)
        v[k] = PQgetisnull(res, 0, k) ? NULL : PQgetvalue(res, 0, k);
    if (PQnfields(res) < SLOT_NCOLS) {
        log_warn("slot query returned too few columns", "columns=%d", PQnfields(res));
        relay_step(r);
        return;
    }
    struct capture_names names = { r->cfg->slot, r->cfg->publication, r->cfg->schema, r->cfg->table };
    struct failover_news n = capture_slot_seen(s, v, &names, stats_now(), &r->cap->plan,
                                               r->st.role == STATS_ROLE_LEADER, &r->cap->failover,
                                               r->cap->recovery != NULL);
    if (n.say)
        log_write(n.level, n.say, "slot=%s slot_recovery=%s detail=%s%s%s",
                  r->cfg->slot, capture_recover_mode(&r->cap->rec), log_quote(n.text),
                  r->cap->rec.no_reconcile[0] ? " reconcile_not_possible=" : "",
                  r->cap->rec.no_reconcile[0] ? log_quote(r->cap->rec.no_reconcile) : "");
    if (n.gap)
        relay_capture_recover(r);
    relay_step(r);
}

void relay_capture_slot_query(struct relay *r)
{
    const char *params[] = { r->cfg->slot, r->cfg->publication };
    capture_plan_slot_queried(&r->cap->plan, relay_now_ms(r));
    pg_query(&r->pg, r->cap->sql.slot_status, 2, params, on_slot, r);
}

static void on_taken_over(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        log_error("cannot end the session that reads the replication slot", "slot=%s error=%s",
                  r->cfg->slot, log_quote(PQresultErrorMessage(res)));
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
        log_warn("ended the session that read the replication slot: this relay leads",
                 "slot=%s pid=%s application_name=%s", r->cfg->slot, PQgetvalue(res, i, 0),
                 log_quote(PQgetvalue(res, i, 1)));
    capture_plan_taken_over(&r->cap->plan, relay_now_ms(r));
    relay_step(r);
}

void relay_capture_take_over(struct relay *r)
{
    const char *params[] = { r->cfg->slot };
    capture_plan_taking_over(&r->cap->plan);
    pg_query(&r->pg, r->cap->sql.take_over, 1, params, on_taken_over, r);
}

/* Retention of rows the relay only read: on_sent = mark keeps them for
 * relay.retention after they were written; on_sent = delete removes those
 * older than the newest confirmed commit (already in the WAL, and relayed or
 * on their way: deleting a row never takes its insert out of the stream). */
void relay_capture_retention(struct relay *r)
{
    char bound[64];
    if (!capture_retention_bound(r->cfg->on_sent == RELAY_ON_SENT_DELETE, r->st.slot.last_commit_time,
                                 stats_now(), r->cfg->retention_ms, bound, sizeof bound)) {
        r->retention_due = false;
        r->last_retention_ms = relay_now_ms(r);
        return;
    }
    relay_retention_delete(r, r->cap->sql.retention, bound);
}

void relay_capture_connected(struct relay *r)
{
    failover_watch_connected(&r->cap->failover, relay_now_ms(r));
    capture_plan_connected(&r->cap->plan);
}
