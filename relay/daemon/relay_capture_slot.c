/* relay_capture_slot.c — relay.capture = wal: what the main connection does
 * for the capture, through the plan: the slot as pg_replication_slots shows
 * it (every few seconds, for every role), the heartbeat that keeps an idle
 * slot moving, ending a deposed leader's walsender, and retention of the rows
 * the relay only reads. */
#include "daemon/relay_int.h"

#define CAPTURE_SLOT_QUERY_EVERY_MS 5000

/* ---- what the main connection does for the capture ------------------------ */

bool relay_capture_heartbeat_due(const struct relay *r)
{
    const struct capture *c = &r->cap;
    return c->on && r->cfg->heartbeat_ms > 0 && c->state == CAPTURE_STREAMING &&
           relay_now_ms((struct relay *)r) - c->last_progress_ms >= (uint64_t)r->cfg->heartbeat_ms;
}

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
    r->cap.last_progress_ms = relay_now_ms(r); /* one at a time, whatever its fate */
    pg_query(&r->pg, r->csql.heartbeat, 1, params, on_heartbeat, r);
}

bool relay_capture_slot_query_due(const struct relay *r)
{
    return r->cap.on && relay_now_ms((struct relay *)r) >= r->cap.slot_query_ms;
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
    s->query_time = stats_now();
    s->known = v[SLOT_EXISTS] && v[SLOT_EXISTS][0] == 't';
    s->active = v[SLOT_ACTIVE] && v[SLOT_ACTIVE][0] == 't';
    s->active_pid = v[SLOT_ACTIVE_PID] ? atoi(v[SLOT_ACTIVE_PID]) : 0;
    snprintf(s->wal_status, sizeof s->wal_status, "%s", v[SLOT_WAL_STATUS] ? v[SLOT_WAL_STATUS] : "");
    s->confirmed_lsn = pgo_lsn_parse(v[SLOT_CONFIRMED_LSN]);
    s->restart_lsn = pgo_lsn_parse(v[SLOT_RESTART_LSN]);
    s->retained_bytes = v[SLOT_RETAINED_BYTES] ? strtoll(v[SLOT_RETAINED_BYTES], NULL, 10) : 0;
    s->lag_bytes = v[SLOT_LAG_BYTES] ? strtoll(v[SLOT_LAG_BYTES], NULL, 10) : 0;
    const char *plugin = v[SLOT_PLUGIN] ? v[SLOT_PLUGIN] : "pgoutput";
    if (!s->known)
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" does not exist; create it with `outbox-relay migrate` "
                 "(relay.capture = wal)", r->cfg->slot);
    else if (strcmp(plugin, "pgoutput") != 0)
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" uses the plugin %s; the relay reads pgoutput slots",
                 r->cfg->slot, plugin);
    else if (!(v[SLOT_DATABASE_OK] && v[SLOT_DATABASE_OK][0] == 't'))
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" belongs to another database", r->cfg->slot);
    else if (strcmp(s->wal_status, "lost") == 0)
        relay_capture_explain(r, "replication slot is invalidated (wal_status lost)", "55000");
    else if (!(v[SLOT_PUBLICATION_OK] && v[SLOT_PUBLICATION_OK][0] == 't'))
        snprintf(s->problem, sizeof s->problem,
                 "publication \"%s\" does not publish %s.%s; run `outbox-relay migrate`",
                 r->cfg->publication, r->cfg->schema, r->cfg->table);
    else if (r->cap.state == CAPTURE_STREAMING || r->st.role != STATS_ROLE_LEADER)
        s->problem[0] = '\0'; /* a leader not streaming keeps what its stream was told */
    relay_failover_slot_seen(r, v[SLOT_WALFILE], s->known, s->confirmed_lsn);
    relay_step(r);
}

void relay_capture_slot_query(struct relay *r)
{
    const char *params[] = { r->cfg->slot, r->cfg->publication };
    r->cap.slot_query_ms = relay_now_ms(r) + CAPTURE_SLOT_QUERY_EVERY_MS;
    pg_query(&r->pg, r->csql.slot_status, 2, params, on_slot, r);
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
    r->cap.restart_at_ms = relay_now_ms(r) + 100; /* its walsender needs a moment to exit */
    relay_step(r);
}

void relay_capture_take_over(struct relay *r)
{
    const char *params[] = { r->cfg->slot };
    r->cap.slot_busy = false;
    pg_query(&r->pg, r->csql.take_over, 1, params, on_taken_over, r);
}

/* Retention of rows the relay only read: on_sent = mark keeps them for
 * relay.retention after they were written; on_sent = delete removes those
 * older than the newest confirmed commit (already in the WAL, and relayed or
 * on their way: deleting a row never takes its insert out of the stream). */
static void on_retention(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    long deleted = PQresultStatus(res) == PGRES_COMMAND_OK ? strtol(PQcmdTuples(res), NULL, 10) : 0;
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        log_error("retention delete failed", "error=%s", log_quote(PQresultErrorMessage(res)));
    else if (deleted > 0)
        log_debug("retention deleted rows", "rows=%ld", deleted);
    if (deleted < 1000) {
        r->retention_due = false;
        r->last_retention_ms = relay_now_ms(r);
    }
    relay_step(r);
}

void relay_capture_retention(struct relay *r)
{
    char bound[64], limit[16] = "1000";
    double t = r->cfg->on_sent == RELAY_ON_SENT_DELETE ? r->st.slot.last_commit_time
                                                       : stats_now() - (double)r->cfg->retention_ms / 1000.0;
    if (t <= 0) {
        r->retention_due = false;
        r->last_retention_ms = relay_now_ms(r);
        return;
    }
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(bound, sizeof bound, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(bound + n, sizeof bound - n, ".%06d+00", (int)((t - (double)secs) * 1e6));
    const char *params[] = { bound, limit };
    pg_query(&r->pg, r->csql.retention, 2, params, on_retention, r);
}

