/* capture_recover.c — relay.slot_recovery = reconcile: when a failover's gap
 * is closed from the table, and what that changes (core/capture_recover.h). */
#include "core/capture_recover.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

bool capture_recover_setup(struct capture_recover *c, bool wanted, bool rows_deleted,
                           bool messages, bool app_table)
{
    bool provable = failover_gap_provable(rows_deleted, messages, app_table, c->no_reconcile,
                                          sizeof c->no_reconcile);
    c->reconcile = wanted && provable;
    if (!wanted)
        c->no_reconcile[0] = '\0'; /* stop was asked for: nothing to explain */
    return wanted && !provable;
}

const char *capture_recover_mode(const struct capture_recover *c)
{
    return c->reconcile ? "reconcile" : "stop";
}

bool capture_recover_due(const struct capture_recover *c, const struct failover_watch *w,
                         bool leading, bool running, uint64_t now_ms)
{
    return c->reconcile && w->blocked && !running && leading && now_ms >= c->retry_at_ms;
}

void capture_recover_since(double confirmed_at, double started_at, char *out, size_t len)
{
    time_t since = (time_t)failover_recovery_since(confirmed_at, started_at);
    struct tm tm;
    gmtime_r(&since, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void capture_recover_problem(const char *since, char *out, size_t len)
{
    snprintf(out, len,
             "failover: reconciling (relay.slot_recovery = reconcile): the slot made if missing, "
             "the rows created since %s that Kafka lacks published; the stream starts after",
             since);
}

void capture_recover_done(struct stats_slot *s, struct failover_watch *w, struct capture_plan *p,
                          uint64_t published, double now)
{
    s->recoveries_total++;
    s->recovered_events_total += published;
    s->last_recovery_time = now;
    s->last_recovery_events = published;
    failover_watch_recovered(w);
    capture_plan_new_slot(p);
}

void capture_recover_failed(struct capture_recover *c, uint64_t now_ms)
{
    c->retry_at_ms = now_ms + CAPTURE_RECOVER_RETRY_MS;
}

enum recover_slot capture_recover_slot_made(bool made, const char *snapshot, const char *sqlstate)
{
    if (made)
        return snapshot && *snapshot ? RECOVER_SLOT_SNAPSHOT : RECOVER_SLOT_MADE;
    /* duplicate_object: the slot is there; whatever else went wrong, the SQL
     * function is tried as before, so a slot always exists before the read. */
    return sqlstate && strcmp(sqlstate, "42710") == 0 ? RECOVER_SLOT_EXISTED
                                                       : RECOVER_SLOT_BY_SQL;
}

const char *capture_recover_table_read(enum recover_slot made, bool imported)
{
    if (made == RECOVER_SLOT_SNAPSHOT && imported)
        return "slot_snapshot";
    return "own_snapshot";
}
