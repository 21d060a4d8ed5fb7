/* capture_slot.c — relay.capture = wal: the slot as pg_replication_slots
 * shows it, read into what the relay reports, and what an operator is told
 * to do about the server's refusals, a lost stream and a dead row it would
 * not keep. */
#include "core/capture_slot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pgoutput.h"

static bool is_true(const char *v)
{
    return v && v[0] == 't';
}

void capture_slot_read(struct stats_slot *s, const char *const v[SLOT_NCOLS],
                       const struct capture_names *n, double now, bool clear)
{
    s->query_time = now;
    s->known = is_true(v[SLOT_EXISTS]);
    s->active = is_true(v[SLOT_ACTIVE]);
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
                 "(relay.capture = wal)", n->slot);
    else if (strcmp(plugin, "pgoutput") != 0)
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" uses the plugin %s; the relay reads pgoutput slots",
                 n->slot, plugin);
    else if (!is_true(v[SLOT_DATABASE_OK]))
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" belongs to another database", n->slot);
    else if (strcmp(s->wal_status, "lost") == 0)
        capture_explain("replication slot is invalidated (wal_status lost)", "55000", s->problem,
                        sizeof s->problem);
    else if (!is_true(v[SLOT_PUBLICATION_OK]))
        snprintf(s->problem, sizeof s->problem,
                 "publication \"%s\" does not publish %s.%s; run `outbox-relay migrate`",
                 n->publication, n->schema, n->table);
    else if (clear)
        s->problem[0] = '\0'; /* a leader not streaming keeps what its stream was told */
}

struct failover_news capture_slot_seen(struct stats_slot *s, const char *const v[SLOT_NCOLS],
                                       const struct capture_names *n, double now,
                                       const struct capture_plan *p, bool leader,
                                       struct failover_watch *w, bool recovering)
{
    capture_slot_read(s, v, n, now, p->state == CAPTURE_STREAMING || !leader);
    struct failover_news news = failover_watch_seen(w, v[SLOT_WALFILE], s->known, s->confirmed_lsn,
                                                    p->confirmed, n->slot);
    if (news.gap && !recovering)
        snprintf(s->problem, sizeof s->problem, "%s", news.text);
    return news;
}

void capture_explain(const char *why, const char *sqlstate, char *out, size_t len)
{
    const char *hint = "";
    if (strcmp(sqlstate, "42704") == 0)
        hint = "; create it with `outbox-relay migrate` (relay.capture = wal)";
    else if (strcmp(sqlstate, "55000") == 0)
        hint = "; the slot was invalidated (max_slot_wal_keep_size): events after its last "
               "confirmed position may be gone. Drop and create it (`outbox-relay slot drop "
               "--yes`, `outbox-relay migrate`), then `outbox-relay verify` the window and "
               "`outbox-relay replay` what it finds missing";
    else if (strcmp(sqlstate, "55006") == 0)
        hint = "; another client reads the slot";
    else if (strcmp(sqlstate, "42501") == 0 || strcmp(sqlstate, "28000") == 0)
        hint = "; the role needs the REPLICATION attribute";
    snprintf(out, len, "%s%s", why, hint);
}

struct capture_loss capture_lost(enum capture_state state, const char *why, const char *sqlstate,
                                 char *problem, size_t len)
{
    struct capture_loss l = { .busy = strcmp(sqlstate, "55006") == 0 };
    if (state == CAPTURE_ENDING)
        return l; /* ended as asked: nothing to say */
    if (*sqlstate || state != CAPTURE_STREAMING)
        capture_explain(why, sqlstate, problem, len);
    l.say = state == CAPTURE_STREAMING ? "replication stream lost"
                                       : "cannot stream from the replication slot";
    return l;
}

bool capture_dead_refused(const char *sqlstate, const char *event_id, const char *why,
                          char *reason, size_t len)
{
    /* A lost connection, a conflict or a shutdown passes; anything else
     * (no privilege, a column missing) will not: the stream stops here. */
    if (strncmp(sqlstate, "08", 2) == 0 || strncmp(sqlstate, "40", 2) == 0 ||
        strncmp(sqlstate, "53", 2) == 0 || strncmp(sqlstate, "57", 2) == 0)
        return false;
    snprintf(reason, len,
             "event %.36s cannot be produced (%.90s) and cannot be kept as a dead row "
             "(SQLSTATE %.5s%s)", event_id, why, sqlstate,
             strcmp(sqlstate, "42501") == 0 ? ": the role needs INSERT and UPDATE on the table" : "");
    return true;
}

bool capture_retention_bound(bool delete, double last_commit, double now, long retention_ms,
                             char *out, size_t len)
{
    double t = delete ? last_commit : now - (double)retention_ms / 1000.0;
    if (t <= 0)
        return false;
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(out, len, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out + n, len - n, ".%06d+00", (int)((t - (double)secs) * 1e6));
    return true;
}
